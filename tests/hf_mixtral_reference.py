#!/usr/bin/python3
"""An independent PyTorch reference of MixtralForCausalLM for tests/hf_mixtral_parity.sh.

Runs a Hugging Face Mixtral directory (as `tessera convert --saver hf` writes it) in float64 through a
plain PyTorch implementation written from the architecture (the transformers package is not used):
Llama's decoder (RMSNorm, rotate-half rope, grouped-query attention; tests/hf_reference.py) with each MLP
replaced by MixtralSparseMoeBlock:
    p = softmax(gate(x)) over all experts; the top k of p, renormalised to sum 1;
    y = sum over the chosen experts e of p_e * w2_e(silu(w1_e x) * w3_e x).
Compares the logits, the mean next-token loss and every weight gradient with `tessera debug-forward`'s file.

The gradients are of Tessera's training objective: the LM loss plus, when the export records a
router_aux_loss_coef, Megatron's load-balancing loss of each layer (switch_load_balancing_loss_func:
E / (k T^2) * sum_i (sum_t p_ti) * tokens routed to i, with p the softmax over all experts) times it. That
is not HF's aux loss (one over all layers' tokens, times E), which no HF forward returns in its logits or
LM loss anyway. Tessera's file has that loss averaged over the layers as "aux.load_balancing_loss".

Routing is a discrete choice: float32 and float64 agree on it only away from ties. The smallest margin
between each token's k-th and (k+1)-th router logit is reported, and below MIN_MARGIN the run fails as
"near a tie" (a model to change, not a result), rather than flake.

usage: hf_mixtral_reference.py HF_DIR TESSERA_OUT.safetensors TOKENS(comma-separated) [TOLERANCE]
Exits 1 on a relative difference above TOLERANCE (default 1e-5) or a near tie.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_reference import compare_with_tessera, llama_logits, read_model, read_safetensors  # noqa: E402

MIN_MARGIN = 1e-6


def sparse_moe_block(c, w, p, x, router_logits):
    """MixtralSparseMoeBlock on x [T, h]; appends the router logits [T, E] to router_logits."""
    experts, k = c["num_local_experts"], c["num_experts_per_tok"]
    b = p + "block_sparse_moe."
    logits = x @ w[b + "gate.weight"].t()
    router_logits.append(logits)
    weights, chosen = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(experts):
        token, slot = torch.where(chosen == e)
        if len(token) == 0:
            continue
        xe, we = x[token], f"{b}experts.{e}."
        y = (torch.nn.functional.silu(xe @ w[we + "w1.weight"].t()) * (xe @ w[we + "w3.weight"].t())) @ \
            w[we + "w2.weight"].t()
        out = out.index_add(0, token, y * weights[token, slot].unsqueeze(-1))
    return out


def load_balancing_loss(logits, k):
    """Megatron's switch load-balancing loss of one layer (without its coefficient)."""
    t, experts = logits.shape
    probs = torch.softmax(logits, dim=-1)
    routed = torch.zeros(experts, dtype=torch.float64)
    routed.index_add_(0, torch.topk(probs, k, dim=-1).indices.reshape(-1), torch.ones(t * k, dtype=torch.float64))
    return experts / (k * t * t) * (probs.sum(dim=0) * routed).sum()


def main():
    hf_dir, tessera_out, tokens = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
    config, weights = read_model(hf_dir)
    arch = config["architectures"][0]
    if arch != "MixtralForCausalLM":
        sys.exit(f"{hf_dir}: architecture {arch}, not MixtralForCausalLM")
    k = config["num_experts_per_tok"]
    ids, labels = torch.tensor(tokens[:-1]), torch.tensor(tokens[1:])
    router_logits = []
    logits = llama_logits(config, weights, ids,
                          mlp=lambda c, w, p, x: sparse_moe_block(c, w, p, x, router_logits))
    loss = torch.nn.functional.cross_entropy(logits, labels)
    balance = [load_balancing_loss(r, k) for r in router_logits]
    coeff = config.get("router_aux_loss_coef", 0.0)
    (loss + coeff * sum(balance)).backward()

    # The margin of each token's routing decision in each layer.
    margin = float("inf")
    if k < config["num_local_experts"]:
        for r in router_logits:
            top = torch.topk(r.detach(), k + 1, dim=-1).values
            margin = min(margin, (top[:, k - 1] - top[:, k]).min().item())
    near_tie = margin < MIN_MARGIN
    if near_tie:
        print(f"  NEAR A TIE: a token's k-th and (k+1)-th router logits differ by {margin:.3e} < {MIN_MARGIN:g}; "
              "the routing is not reproducible across precisions, change the test's model or tokens")

    references = [("logits", logits.detach()), ("loss", loss.detach().reshape(1))]
    got = read_safetensors(tessera_out)
    if "aux.load_balancing_loss" in got:
        references.append(("aux.load_balancing_loss", (sum(balance) / len(balance)).detach().reshape(1)))
    failures, worst = compare_with_tessera(tessera_out, references, weights, tol, hf_dir)
    for name in got:
        if name.startswith("aux.") and name != "aux.load_balancing_loss":
            failures += 1
            print(f"  UNSUPPORTED {name}: this reference has only the load-balancing loss")
    failures += near_tie
    print(f"{arch}: logits, loss{', load balancing' if 'aux.load_balancing_loss' in got else ''} and "
          f"{len(weights)} gradients over {len(router_logits)} MoE layers; worst relative difference {worst:.3e} "
          f"(tolerance {tol:g}); smallest routing margin {margin:.3e}; {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
