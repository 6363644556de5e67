#!/usr/bin/python3
"""An independent float64 PyTorch reference of Qwen3MoeForCausalLM and DeepseekV3ForCausalLM, for
tests/hf_moe_parity.sh. Written from the published model definitions (transformers' modeling_qwen3_moe.py
and modeling_deepseek_v3.py; the transformers package is not used):

Qwen3MoeForCausalLM: Qwen3's decoder (tests/hf_reference.py's llama_logits with q_norm/k_norm), layer i's
  MLP sparse unless i is in mlp_only_layers or (i + 1) % decoder_sparse_step != 0:
    p = softmax(gate(x)) over all experts; the top k of p, renormalised when norm_topk_prob;
    y = sum over the chosen experts e of p_e * down_e(silu(gate_e x) * up_e x).
DeepseekV3ForCausalLM (with its MTP layers: deepseek_logits) and DeepseekV2ForCausalLM (deepseek_v2_route):
  Multi-Latent Attention
    q = q_b(rms(q_a(x))) (or q_proj(x)), per head [nope | rope]; [k_lat | k_rot] = kv_a_proj_with_mqa(x);
    per head [k_nope | v] = kv_b(rms(k_lat)); the rope parts de-interleaved (rope_interleave), rotated with
    YaRN's frequencies and attention factor; softmax scale qk_head_dim^-1/2 * mscale(factor, mscale_all_dim)^2;
  dense MLPs below first_k_dense_replace, then the sigmoid router: s = sigmoid(gate(x)); choice = s + bias;
  group score = sum of a group's 2 best choices; the topk_group best groups kept (others 0); top k of the
  choices; weights = s of those, / (sum + 1e-20) when norm_topk_prob, * routed_scaling_factor; plus the
  shared experts (one MLP).
Compares the logits, the next-token loss (plus, when the config records router_aux_loss_coef, Megatron's
load-balancing loss, as tests/hf_mixtral_reference.py) and every weight gradient with `tessera debug-forward`'s
file. Routing is a discrete choice: a margin below MIN_MARGIN fails as "near a tie".

usage: hf_moe_reference.py HF_DIR TESSERA_OUT.safetensors TOKENS [TOLERANCE]
       hf_moe_reference.py --greedy HF_DIR PROMPT_TOKENS N   (prints the N greedy continuation tokens)
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_mixtral_reference import load_balancing_loss  # noqa: E402
from hf_reference import causal_attention, compare_with_tessera, llama_logits, read_model, read_safetensors  # noqa: E402

MIN_MARGIN = 1e-6
F = torch.nn.functional


def swiglu(w, p, x):
    return (F.silu(x @ w[p + "gate_proj.weight"].t()) * (x @ w[p + "up_proj.weight"].t())) @ w[p + "down_proj.weight"].t()


def rms(w, p, x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[p + ".weight"]


class Routing:
    """What the MoE blocks of one forward record: router logits (for the aux loss) and decision margins."""

    def __init__(self):
        self.logits, self.margin = [], float("inf")

    def note_margin(self, scores, k):
        if k < scores.shape[-1]:
            top = torch.topk(scores.detach(), k + 1, dim=-1).values
            self.margin = min(self.margin, (top[:, k - 1] - top[:, k]).min().item())


def experts_sum(w, b, x, chosen, weights, n):
    out = torch.zeros_like(x)
    for e in range(n):
        token, slot = torch.where(chosen == e)
        if len(token):
            out = out.index_add(0, token, swiglu(w, f"{b}experts.{e}.", x[token]) * weights[token, slot].unsqueeze(-1))
    return out


def qwen3_moe_mlp(c, w, p, x, routing):
    i = int(p.split(".")[2])
    if i in c.get("mlp_only_layers", []) or (i + 1) % c.get("decoder_sparse_step", 1) != 0:
        return swiglu(w, p + "mlp.", x)
    k = c["num_experts_per_tok"]
    logits = x @ w[p + "mlp.gate.weight"].t()
    routing.logits.append(logits)
    routing.note_margin(logits, k)
    weights, chosen = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
    if c.get("norm_topk_prob", False):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return experts_sum(w, p + "mlp.", x, chosen, weights, c["num_experts"])


def yarn_get_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def deepseek_rope(c, t):
    """cos, sin [t, rope_dim] (times YaRN's attention factor) and the softmax scale. DeepSeek-V2's too, as
    DeepSeek's own modeling_deepseek.py (and Megatron, vLLM) scale its softmax by mscale(factor,
    mscale_all_dim)^2; transformers' DeepseekV2Attention leaves that out. Its complex-number rotation of the
    pairs (2i, 2i + 1) is this rotation of the de-interleaved halves, permuted alike in queries and keys."""
    d, base = c["qk_rope_head_dim"], c.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    s = c.get("rope_scaling") or {}
    attention_factor, scale = 1.0, (c["qk_nope_head_dim"] + d) ** -0.5
    if s.get("rope_type", s.get("type")) == "yarn":
        factor = s["factor"]
        orig = s.get("original_max_position_embeddings", c["max_position_embeddings"])
        fast, slow = s.get("beta_fast", 32), s.get("beta_slow", 1)

        def corr(turns):
            return d * math.log(orig / (turns * 2 * math.pi)) / (2 * math.log(base))

        low, high = max(math.floor(corr(fast)), 0), min(math.ceil(corr(slow)), d - 1)
        high = high + 0.001 if low == high else high
        ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extrapolation = 1 - ramp
        inv_freq = inv_freq / factor * (1 - extrapolation) + inv_freq * extrapolation
        mscale, all_dim = s.get("mscale"), s.get("mscale_all_dim")
        attention_factor = (yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, all_dim) if mscale and all_dim
                            else yarn_get_mscale(factor, 1))
        if all_dim:
            scale *= yarn_get_mscale(factor, all_dim) ** 2
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_factor, emb.sin() * attention_factor, scale


def mla(c, w, p, x):
    t, nh = x.shape[0], c["num_attention_heads"]
    nope, rope, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    a = p + "self_attn."
    if c.get("q_lora_rank"):
        q = rms(w, a + "q_a_layernorm", x @ w[a + "q_a_proj.weight"].t(), 1e-6) @ w[a + "q_b_proj.weight"].t()
    else:
        q = x @ w[a + "q_proj.weight"].t()
    q = q.reshape(t, nh, nope + rope).transpose(0, 1)
    ckv = x @ w[a + "kv_a_proj_with_mqa.weight"].t()
    k_lat, k_rot = ckv[:, :c["kv_lora_rank"]], ckv[:, c["kv_lora_rank"]:]
    kv = (rms(w, a + "kv_a_layernorm", k_lat, 1e-6) @ w[a + "kv_b_proj.weight"].t()).reshape(t, nh, nope + dv)
    kv = kv.transpose(0, 1)
    k_nope, v = kv[..., :nope], kv[..., nope:]
    cos, sin, scale = deepseek_rope(c, t)

    def rotate(y):  # de-interleave (rope_interleave), then rotate_half
        y = y.reshape(*y.shape[:-1], rope // 2, 2).transpose(-1, -2).reshape(y.shape)
        y1, y2 = y[..., :rope // 2], y[..., rope // 2:]
        return y * cos + torch.cat((-y2, y1), dim=-1) * sin

    q = torch.cat((q[..., :nope], rotate(q[..., nope:])), dim=-1)
    k = torch.cat((k_nope, rotate(k_rot).unsqueeze(0).expand(nh, t, rope)), dim=-1)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1), float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(0, 1).reshape(t, nh * dv)
    return out @ w[a + "o_proj.weight"].t()


def deepseek_v2_route(c, x, gate, routing):
    """DeepseekV2Moe: softmax over all experts; greedy top-k, or group_limited_greedy (the topk_group groups
    of highest maximum kept, the others 0); the chosen probabilities times routed_scaling_factor."""
    k, probs = c["num_experts_per_tok"], torch.softmax(x @ gate.t(), dim=-1)
    if c.get("topk_method", "greedy") == "group_limited_greedy":
        groups, keep = c["n_group"], c["topk_group"]
        group_scores = probs.reshape(-1, groups, probs.shape[1] // groups).max(dim=-1).values
        routing.note_margin(group_scores, keep)
        mask = torch.zeros_like(group_scores).scatter_(1, torch.topk(group_scores, keep, dim=-1)[1], 1).bool()
        mask = mask.unsqueeze(-1).expand(-1, groups, probs.shape[1] // groups).reshape(probs.shape)
        routing.note_margin(probs.masked_fill(~mask, float("-inf")), k)
        chosen = torch.topk(probs.masked_fill(~mask, 0.0), k, dim=-1)[1]
    else:
        routing.note_margin(probs, k)
        chosen = torch.topk(probs, k, dim=-1)[1]
    return chosen, probs.gather(1, chosen) * c.get("routed_scaling_factor", 1.0)


def deepseek_moe(c, w, p, x, routing):
    b, n, k = p + "mlp.", c["n_routed_experts"], c["num_experts_per_tok"]
    if c["architectures"][0] == "DeepseekV2ForCausalLM":
        chosen, weights = deepseek_v2_route(c, x, w[b + "gate.weight"], routing)
        out = experts_sum(w, b, x, chosen, weights, n)
        return out + swiglu(w, b + "shared_experts.", x) if c.get("n_shared_experts") else out
    groups, keep = c.get("n_group", 1), c.get("topk_group", 1)
    scores = torch.sigmoid(x @ w[b + "gate.weight"].t())
    choice = scores + w[b + "gate.e_score_correction_bias"]
    group_scores = choice.reshape(-1, groups, n // groups).topk(2, dim=-1)[0].sum(dim=-1)
    if keep < groups:
        routing.note_margin(group_scores, keep)
    group_idx = torch.topk(group_scores, keep, dim=-1)[1]
    mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1).bool()
    mask = mask.unsqueeze(-1).expand(-1, groups, n // groups).reshape(-1, n)
    routing.note_margin(choice.masked_fill(~mask, float("-inf")), k)
    chosen = torch.topk(choice.masked_fill(~mask, 0.0), k, dim=-1)[1]
    weights = scores.gather(1, chosen)
    if c.get("norm_topk_prob", True):
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    weights = weights * c.get("routed_scaling_factor", 1.0)
    out = experts_sum(w, b, x, chosen, weights, n)
    if c.get("n_shared_experts"):
        out = out + swiglu(w, b + "shared_experts.", x)
    return out


def deepseek_layer(c, w, i, h, routing):
    eps, p = c["rms_norm_eps"], f"model.layers.{i}."
    h = h + mla(c, w, p, rms(w, p + "input_layernorm", h, eps))
    x = rms(w, p + "post_attention_layernorm", h, eps)
    return h + (deepseek_moe(c, w, p, x, routing) if i >= c["first_k_dense_replace"] else swiglu(w, p + "mlp.", x))


def deepseek_logits(c, w, ids, routing, mtp_logits=None):
    """The main head's logits; with mtp_logits (a list), each MTP module's logits appended to it. MTP module k
    (stored as layer num_hidden_layers + k - 1; DeepSeek-V3's paper, Megatron's MultiTokenPredictionLayer):
    x = eh_proj([enorm(embedding of the tokens k ahead) | hnorm(h_{k-1})]), h_k = shared_head.norm(layer(x)),
    logits through the model's own output layer (shared_head.head and embed_tokens are copies of it)."""
    eps, n = c["rms_norm_eps"], c["num_hidden_layers"]
    h = w["model.embed_tokens.weight"][ids]
    for i in range(n):
        h = deepseek_layer(c, w, i, h, routing)
    h = rms(w, "model.norm", h, eps)
    head = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings", False) else w["lm_head.weight"]
    logits = h @ head.t()
    for k in range(c.get("num_nextn_predict_layers", 0) if mtp_logits is not None else 0):
        p = f"model.layers.{n + k}."
        ahead = torch.cat((ids[k + 1:], torch.zeros(k + 1, dtype=ids.dtype)))  # Megatron's roll_tensor
        e = rms(w, p + "enorm", w["model.embed_tokens.weight"][ahead], eps)
        x = torch.cat((e, rms(w, p + "hnorm", h, eps)), dim=-1) @ w[p + "eh_proj.weight"].t()
        h = rms(w, p + "shared_head.norm", deepseek_layer(c, w, n + k, x, routing), eps)
        mtp_logits.append(h @ head.t())
    return logits


def logits_of(config, weights, ids, routing, mtp_logits=None):
    arch = config["architectures"][0]
    if arch in ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"):
        return deepseek_logits(config, weights, ids, routing, mtp_logits)
    if arch == "Qwen3MoeForCausalLM":
        return llama_logits(config, weights, ids, mlp=lambda c, w, p, x: qwen3_moe_mlp(c, w, p, x, routing))
    sys.exit(f"architecture {arch} is not Qwen3MoeForCausalLM or DeepseekV3ForCausalLM")


def read_dequantized(hf_dir):
    """read_model, with DeepSeek-V3's FP8 weights times their weight_scale_inv blocks (its weight_dequant)."""
    config, weights = read_model(hf_dir)
    rows, cols = (config.get("quantization_config") or {}).get("weight_block_size", [128, 128])
    for name in [k for k in weights if k.endswith("_scale_inv")]:
        scale, w = weights.pop(name).detach(), weights[name[:-len("_scale_inv")]].detach()
        scale = scale.repeat_interleave(rows, 0)[:w.shape[0]].repeat_interleave(cols, 1)[:, :w.shape[1]]
        weights[name[:-len("_scale_inv")]] = (w * scale).requires_grad_(True)
    return config, weights


def greedy(hf_dir, prompt, n):
    config, weights = read_dequantized(hf_dir)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(logits_of(config, weights, torch.tensor(ids), Routing())[-1].argmax()))
    print(" ".join(str(i) for i in ids[len(prompt):]))


def main():
    if sys.argv[1] == "--greedy":
        return greedy(sys.argv[2], [int(x) for x in sys.argv[3].split(",")], int(sys.argv[4]))
    hf_dir, tessera_out, tokens = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
    config, weights = read_dequantized(hf_dir)
    ids, labels = torch.tensor(tokens[:-1]), torch.tensor(tokens[1:])
    routing, mtp_logits = Routing(), []
    # DeepSeek's MTP copies of the embedding and output layer are the model's own: their gradients are not
    # separate (Tessera reports the shared tensors' under both names).
    n = config.get("num_hidden_layers", 0)
    copies = [f"model.layers.{n + k}.{x}" for k in range(config.get("num_nextn_predict_layers", 0))
              for x in ("embed_tokens.weight", "shared_head.head.weight")]
    for name in copies:
        weights.pop(name)
    logits = logits_of(config, weights, ids, routing, mtp_logits)
    loss = F.cross_entropy(logits, labels)
    balance = [load_balancing_loss(r, config["num_experts_per_tok"]) for r in routing.logits]
    coeff = config.get("router_aux_loss_coef", 0.0) if balance else 0.0
    # Megatron's MTP objective: mtp_loss_scaling_factor (its default 0.1, which an import takes) over the
    # modules, each module's mean cross-entropy over the positions whose label k + 1 ahead exists.
    mtp = sum(F.cross_entropy(m[:len(labels) - k - 1], labels[k + 1:]) for k, m in enumerate(mtp_logits))
    (loss + coeff * sum(balance) + 0.1 / max(len(mtp_logits), 1) * mtp).backward()
    references = [("logits", logits.detach()), ("loss", loss.detach().reshape(1))]
    got = read_safetensors(tessera_out)
    if "aux.load_balancing_loss" in got:
        references.append(("aux.load_balancing_loss", (sum(balance) / len(balance)).detach().reshape(1)))
    failures, worst = compare_with_tessera(tessera_out, references, weights, tol, hf_dir, ignore=copies)
    if routing.margin < MIN_MARGIN:
        failures += 1
        print(f"  NEAR A TIE: a routing margin of {routing.margin:.3e} < {MIN_MARGIN:g}; change the model or tokens")
    print(f"{config['architectures'][0]}: logits, loss and {len(weights)} gradients; worst relative difference "
          f"{worst:.3e} (tolerance {tol:g}); smallest routing margin {routing.margin:.3e}; {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
