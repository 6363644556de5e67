#!/usr/bin/python3
"""An independent PyTorch reference for tests/hf_bert_parity.sh.

Runs a Hugging Face model directory (config.json + safetensors, as `tessera convert --saver hf` writes it
for a BERT) through plain PyTorch implementations of BertForPreTraining / BertForMaskedLM (post-LN:
LayerNorm(x + sublayer(x)), a LayerNorm on the embeddings) and MegatronBertForPreTraining /
MegatronBertForMaskedLM (pre-LN: x + sublayer(LayerNorm(x)), no embedding LayerNorm, a final encoder
LayerNorm), written here from the architectures' definitions (the transformers package is not used), in
float64. Attention follows HF's attention_mask: padded keys get the dtype's minimum added to their scores;
padded query rows still attend to the valid keys. The loss is BertForPreTraining's: the mean masked-LM
cross-entropy over the labelled positions plus the mean sentence-order cross-entropy.

Compares the MLM logits, the sentence-order logits, the loss and its gradient with respect to every weight
against the file `tessera debug-forward` wrote for the same inputs.

usage: hf_bert_reference.py HF_DIR TESSERA_OUT.safetensors --batch-size B --tokens ... --token-types ...
       --padding-mask ... --labels ... [--sentence-order ...] [--tolerance 1e-5]
Exits 1 if any relative difference (Frobenius norm of the difference over that of the reference; over the
largest gradient's for an analytically zero one, the key bias) is above the tolerance and above 4x that of
the same reference run in float32 (rounding alone).
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_reference import read_model, read_safetensors  # noqa: E402  (the safetensors reader only)


def ints(text):
    return [int(x) for x in text.split(",")] if text else []


def gelu_tanh(x):  # HF's gelu_new / gelu_pytorch_tanh
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def bert_forward(c, w, arch, ids, types, mask):
    """-> (MLM logits [B, S, vocab], sentence-order logits [B, 2] or None)."""
    b, s = ids.shape
    post_ln = arch.startswith("Bert")
    h, nh = c["hidden_size"], c["num_attention_heads"]
    d = h // nh
    eps = c["layer_norm_eps"]
    assert c["hidden_act"] in ("gelu_new", "gelu_pytorch_tanh")

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (h,), w[p + ".weight"], w[p + ".bias"], eps)

    def linear(x, p):  # nn.Linear: weight [out, in]
        return x @ w[p + ".weight"].t() + w[p + ".bias"]

    # get_extended_attention_mask: (1 - mask) * finfo.min, broadcast over heads and query rows.
    dtype = w["cls.predictions.bias"].dtype
    additive = (1.0 - mask.to(dtype))[:, None, None, :] * torch.finfo(dtype).min

    def self_attention(x, p):
        def heads(y):
            return y.reshape(b, s, nh, d).permute(0, 2, 1, 3)
        q = heads(linear(x, p + "attention.self.query"))
        k = heads(linear(x, p + "attention.self.key"))
        v = heads(linear(x, p + "attention.self.value"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d) + additive
        ctx = torch.softmax(scores, dim=-1) @ v
        return linear(ctx.permute(0, 2, 1, 3).reshape(b, s, h), p + "attention.output.dense")

    def mlp(x, p):
        return linear(gelu_tanh(linear(x, p + "intermediate.dense")), p + "output.dense")

    e = "bert.embeddings."
    x = w[e + "word_embeddings.weight"][ids] + w[e + "token_type_embeddings.weight"][types]
    x = x + w[e + "position_embeddings.weight"][torch.arange(s)]
    if post_ln:
        x = ln(x, e + "LayerNorm")
    for i in range(c["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        if post_ln:  # BertLayer: LN(x + attention(x)), then LN(a + mlp(a))
            a = ln(x + self_attention(x, p), p + "attention.output.LayerNorm")
            x = ln(a + mlp(a, p), p + "output.LayerNorm")
        else:  # MegatronBertLayer: x + attention(LN(x)), then a + mlp(LN(a))
            a = x + self_attention(ln(x, p + "attention.ln"), p)
            x = a + mlp(ln(a, p + "ln"), p)
    if not post_ln:
        x = ln(x, "bert.encoder.ln")
    t = ln(gelu_tanh(linear(x, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
    mlm = t @ w[e + "word_embeddings.weight"].t() + w["cls.predictions.bias"]  # the tied decoder
    sop = None
    if arch.endswith("ForPreTraining"):
        pooled = torch.tanh(linear(x[:, 0], "bert.pooler.dense"))
        sop = linear(pooled, "cls.seq_relationship")
    return mlm, sop


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("tessera_out")
    ap.add_argument("--batch-size", type=int, required=True)
    for flag in ("--tokens", "--token-types", "--padding-mask", "--labels", "--sentence-order"):
        ap.add_argument(flag, default="")
    ap.add_argument("--tolerance", type=float, default=1e-5)
    # Values such as "-1,4,-1" start with '-': join each flag with its value so argparse takes them.
    argv, i = [], 1
    while i < len(sys.argv):
        if sys.argv[i].startswith("--") and "=" not in sys.argv[i] and i + 1 < len(sys.argv):
            argv.append(sys.argv[i] + "=" + sys.argv[i + 1])
            i += 2
        else:
            argv.append(sys.argv[i])
            i += 1
    a = ap.parse_args(argv)
    config, weights = read_model(a.hf_dir)
    arch = config["architectures"][0]
    b = a.batch_size
    ids = torch.tensor(ints(a.tokens)).reshape(b, -1)
    types = torch.tensor(ints(a.token_types)).reshape(b, -1) if a.token_types else torch.zeros_like(ids)
    mask = torch.tensor(ints(a.padding_mask)).reshape(b, -1) if a.padding_mask else torch.ones_like(ids)
    labels = torch.tensor(ints(a.labels)).reshape(b, -1)
    def run(w):
        mlm, sop = bert_forward(config, w, arch, ids, types, mask)
        loss = torch.nn.functional.cross_entropy(mlm.reshape(-1, mlm.shape[-1]), labels.reshape(-1), ignore_index=-1)
        if sop is not None:
            loss = loss + torch.nn.functional.cross_entropy(sop, torch.tensor(ints(a.sentence_order)))
        loss.backward()
        return mlm.detach(), None if sop is None else sop.detach(), loss.detach().reshape(1)

    mlm, sop, loss = run(weights)
    # The same reference in float32 measures how far float32 rounding alone goes: small gradients (an
    # almost uniform attention's query and key weights) lose digits to cancellation in any float32
    # implementation. A difference is allowed up to the tolerance or 4x the float32 reference's own.
    weights32 = {k: v.detach().float().requires_grad_(True) for k, v in weights.items()}
    mlm32, sop32, loss32 = run(weights32)
    fp32 = {"mlm_logits": mlm32, "binary_logits": sop32, "loss": loss32}
    fp32.update({"grad." + k: v.grad for k, v in weights32.items()})

    got = read_safetensors(a.tessera_out)
    worst, failures = 0.0, 0

    # A gradient that is zero analytically (the key bias: softmax ignores a shift shared by a query row's
    # scores) is rounding noise on both sides; it is measured against the largest gradient instead.
    scale = max(wt.grad.norm().item() for wt in weights.values())

    widened = 0

    def compare(name, ours, ref):
        nonlocal worst, failures, widened
        denom = ref.norm().item()
        if name.startswith("grad.") and denom < 1e-9 * scale:
            denom = scale
        def distance(x):
            return ((x.double().reshape(ref.shape) - ref).norm() / max(denom, 1e-30)).item()
        rel, rounding = distance(ours), distance(fp32[name])
        allowed = max(a.tolerance, 4 * rounding)
        worst = max(worst, rel)
        widened += rel > a.tolerance and rel <= allowed
        if rel > allowed or not math.isfinite(rel):
            failures += 1
            print(f"  MISMATCH {name}: relative difference {rel:.3e} > {allowed:.3e} "
                  f"(tolerance {a.tolerance:g}; float32 PyTorch: {rounding:.3e})")

    compare("mlm_logits", got["mlm_logits"], mlm)
    if sop is not None:
        compare("binary_logits", got["binary_logits"], sop)
    elif "binary_logits" in got:
        failures += 1
        print(f"  EXTRA binary_logits: {arch} has no sentence-order head")
    compare("loss", got["loss"], loss)
    compared = 0
    for name, wt in weights.items():
        key = "grad." + name
        if key not in got:
            # Without the binary head Tessera has no token types: the export's zero rows are constants.
            if name == "bert.embeddings.token_type_embeddings.weight" and sop is None:
                continue
            failures += 1
            print(f"  MISSING gradient of {name} in {a.tessera_out}")
            continue
        compare(key, got[key], wt.grad)
        compared += 1
    for k in got:
        if k.startswith("grad.") and k[5:] not in weights:
            failures += 1
            print(f"  EXTRA {k}: no such weight in {a.hf_dir}")
    heads = "MLM and sentence-order logits" if sop is not None else "MLM logits"
    print(f"{arch}: {heads}, loss {loss.item():.6f} and {compared} gradients; worst relative difference "
          f"{worst:.3e} (tolerance {a.tolerance:g}, {widened} within 4x float32 PyTorch's own rounding); "
          f"{failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
