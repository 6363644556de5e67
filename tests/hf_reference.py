#!/usr/bin/python3
"""An independent PyTorch reference for tests/hf_parity.sh.

Runs a Hugging Face model directory (config.json + safetensors, as `tessera convert --saver hf`
writes it) through plain PyTorch implementations of GPT2LMHeadModel, LlamaForCausalLM (with the
"llama3" and "linear" rope_scaling) and Qwen3ForCausalLM, written here from the architectures'
definitions (the transformers package is not used), in float64.
Compares the logits, the mean next-token loss and its gradient with respect to every weight against
the file `tessera debug-forward` wrote for the same tokens.

usage: hf_reference.py HF_DIR TESSERA_OUT.safetensors TOKENS(comma-separated) [TOLERANCE]
Exits 1 if any relative difference (Frobenius norm of the difference over that of the reference) is
above TOLERANCE (default 1e-5).
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32,
          "I64": torch.int64}


def fp8_e4m3_values():
    """The value of each of the 256 OCP FP8 E4M3 ("fn") bit patterns: sign, 4 exponent bits (bias 7), 3 mantissa
    bits; exponent 0 subnormal, S.1111.111 NaN (this PyTorch may predate torch.float8_e4m3fn)."""
    values = []
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        v = float("nan") if (e, m) == (15, 7) else m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        values.append(-v if b & 128 else v)
    return torch.tensor(values, dtype=torch.float64)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = bytearray(data[base + b:base + end])
        if e["dtype"] == "F8_E4M3":  # decoded to float64
            out[name] = fp8_e4m3_values()[torch.frombuffer(buf, dtype=torch.uint8).long()].reshape(e["shape"])
            continue
        t = torch.frombuffer(buf, dtype=DTYPES[e["dtype"]]) if buf else torch.empty(0, dtype=DTYPES[e["dtype"]])
        out[name] = t.reshape(e["shape"]).clone()
    return out


def read_model(hf_dir):
    with open(os.path.join(hf_dir, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(hf_dir, name)))
    return config, {k: v.double().requires_grad_(True) for k, v in weights.items()}


def causal_attention(q, k, v):
    """q [heads, T, d], k/v [heads, T, d] -> [T, heads * d]."""
    d = q.shape[-1]
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    t = q.shape[1]
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(0, 1).reshape(t, -1)


def gpt2_logits(c, w, ids):
    """GPT2LMHeadModel: learned positions, pre-LN blocks, Conv1D ([in, out]) weights, tanh GELU, tied."""
    t = len(ids)
    nh, h_size = c["n_head"], c["n_embd"]
    d = h_size // nh
    eps = c["layer_norm_epsilon"]

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (h_size,), w[p + ".weight"], w[p + ".bias"], eps)

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    h = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][torch.arange(t)]
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        a = ln(h, p + "ln_1")
        qkv = a @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(h_size, dim=-1)
        q, k, v = (x.reshape(t, nh, d).transpose(0, 1) for x in (q, k, v))
        h = h + causal_attention(q, k, v) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        m = ln(h, p + "ln_2")
        m = gelu_new(m @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        h = h + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    h = ln(h, "transformer.ln_f")
    return h @ w["transformer.wte.weight"].t()


def llama_mlp(c, w, p, x):
    """LlamaMLP: down(silu(gate(x)) * up(x))."""
    mb = c.get("mlp_bias", False)

    def linear(y, name):
        out = y @ w[p + name + ".weight"].t()
        return out + w[p + name + ".bias"] if mb else out

    return linear(torch.nn.functional.silu(linear(x, "mlp.gate_proj")) * linear(x, "mlp.up_proj"), "mlp.down_proj")


def rope_inv_freq(c, d):
    """The rotary frequencies of config c for head size d, with its rope_scaling (transformers'
    _compute_linear_scaling_rope_parameters and _compute_llama3_parameters)."""
    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    s = c.get("rope_scaling") or {}
    kind = s.get("rope_type", s.get("type", "default"))
    if kind == "linear":
        return inv_freq / s["factor"]
    if kind == "llama3":
        factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return torch.where(medium, smoothed, scaled)
    assert kind == "default", f"rope_scaling {kind} is not in this reference"
    return inv_freq


def llama_logits(c, w, ids, mlp=llama_mlp):
    """LlamaForCausalLM: RMSNorm, rotary (rotate_half) on q and k, grouped-query attention, SwiGLU MLP.
    mlp(c, w, layer_prefix, x) is the feed-forward block (Mixtral's is a sparse mixture of experts)."""
    t = len(ids)
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim") or c["hidden_size"] // nh
    eps = c["rms_norm_eps"]
    bias = c.get("attention_bias", False)

    def rms(x, p):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[p + ".weight"]

    def linear(x, p, has_bias):
        y = x @ w[p + ".weight"].t()
        return y + w[p + ".bias"] if has_bias else y

    inv_freq = rope_inv_freq(c, d)
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rotate_half(x):
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def rope(x):  # [heads, T, d]
        return x * cos + rotate_half(x) * sin

    h = w["model.embed_tokens.weight"][ids]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms(h, p + "input_layernorm")
        q = linear(a, p + "self_attn.q_proj", bias).reshape(t, nh, d).transpose(0, 1)
        k = linear(a, p + "self_attn.k_proj", bias).reshape(t, nkv, d).transpose(0, 1)
        v = linear(a, p + "self_attn.v_proj", bias).reshape(t, nkv, d).transpose(0, 1)
        if p + "self_attn.q_norm.weight" in w:  # Qwen3: RMSNorm over each head's query and key, before RoPE
            q, k = rms(q, p + "self_attn.q_norm"), rms(k, p + "self_attn.k_norm")
        q, k = rope(q), rope(k)
        rep = nh // nkv  # repeat_kv: query head j uses key/value head j // rep
        k, v = k.repeat_interleave(rep, dim=0), v.repeat_interleave(rep, dim=0)
        h = h + linear(causal_attention(q, k, v), p + "self_attn.o_proj", bias)
        h = h + mlp(c, w, p, rms(h, p + "post_attention_layernorm"))
    h = rms(h, "model.norm")
    head = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return h @ head.t()


def compare_with_tessera(tessera_out, references, weights, tol, hf_dir, ignore=()):
    """Compares Tessera's file with the reference tensors [(name, tensor)] and with every weight's
    gradient (a weight the loss does not reach has gradient zero); `ignore`: weights whose gradients Tessera
    may report but the reference has not (copies of another weight). Returns (failures, worst)."""
    got = read_safetensors(tessera_out)
    worst = 0.0
    failures = 0

    def compare(name, ours, ref):
        nonlocal worst, failures
        ours = ours.double().reshape(ref.shape)
        rel = ((ours - ref).norm() / max(ref.norm().item(), 1e-30)).item()
        worst = max(worst, rel)
        if rel > tol or not math.isfinite(rel):
            failures += 1
            print(f"  MISMATCH {name}: relative difference {rel:.3e} > {tol:g}")

    for name, ref in references:
        if name not in got:
            failures += 1
            print(f"  MISSING {name} in {tessera_out}")
            continue
        compare(name, got[name], ref)
    for name, wt in weights.items():
        key = "grad." + name
        if key not in got:
            failures += 1
            print(f"  MISSING gradient of {name} in {tessera_out}")
            continue
        compare(key, got[key], wt.grad if wt.grad is not None else torch.zeros_like(wt))
    extra = [k for k in got if k.startswith("grad.") and k[5:] not in weights and k[5:] not in ignore]
    for k in extra:
        failures += 1
        print(f"  EXTRA {k}: no such weight in {hf_dir}")
    return failures, worst


def main():
    hf_dir, tessera_out, tokens = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
    config, weights = read_model(hf_dir)
    arch = config["architectures"][0]
    # Qwen3ForCausalLM is Llama's forward with q_norm and k_norm (llama_logits applies them when present).
    forward = {"GPT2LMHeadModel": gpt2_logits, "LlamaForCausalLM": llama_logits,
               "Qwen3ForCausalLM": llama_logits}[arch]
    ids, labels = torch.tensor(tokens[:-1]), torch.tensor(tokens[1:])
    logits = forward(config, weights, ids)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    loss.backward()
    references = [("logits", logits.detach()), ("loss", loss.detach().reshape(1))]
    failures, worst = compare_with_tessera(tessera_out, references, weights, tol, hf_dir)
    print(f"{arch}: logits, loss and {len(weights)} gradients; worst relative difference {worst:.3e} "
          f"(tolerance {tol:g}); {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
