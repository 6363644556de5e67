#!/usr/bin/python3
"""Writes a toy DeepseekV3ForCausalLM directory (config.json + model.safetensors, random weights) for
tests/hf_moe_parity.sh, as DeepSeek publishes it: the names of modeling_deepseek_v3.py, one file per
expert tensor, bf16 weights (e_score_correction_bias fp32, as _keep_in_fp32_modules_strict keeps it).
Tessera cannot export DeepSeek-V3 yet, so the Hugging Face side is made here.

The sizes exercise every part at toy scale: MLA with query compression, YaRN whose ramp covers
extrapolated, blended and interpolated pairs of the RoPE part, mscale != mscale_all_dim, one dense layer
(first_k_dense_replace) then MoE layers with group-limited sigmoid routing (4 groups, 2 kept, top 4: 2 a
group, as HF scores groups), a correction bias, routed_scaling_factor, a shared expert, and one MTP module
stored as the layer after the last (with its copies of the embedding and output layer).

With --fp8, the projection weights are FP8 with 16 x 16 blocks of weight_scale_inv (quantize_fp8).

With --v2, a DeepseekV2ForCausalLM of the same sizes (V2 below).

usage: hf_deepseek_toy.py [--fp8] [--v2] OUT_DIR [SEED]
"""
import json
import os
import struct
import sys

import torch

CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 40, "moe_intermediate_size": 12,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
    "n_shared_experts": 1, "n_routed_experts": 8, "routed_scaling_factor": 2.5,
    "kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8, "v_head_dim": 12, "qk_nope_head_dim": 8,
    "n_group": 4, "topk_group": 2, "num_experts_per_tok": 4, "first_k_dense_replace": 1, "norm_topk_prob": True,
    "hidden_act": "silu", "num_nextn_predict_layers": 1, "max_position_embeddings": 256, "initializer_range": 0.02, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "rope_theta": 100.0, "rope_interleave": True, "attention_bias": False,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32,
                     "beta_slow": 1, "mscale": 0.9, "mscale_all_dim": 0.8},
    "torch_dtype": "bfloat16",
}


def shapes(c):
    h, nh = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    s = {"model.embed_tokens.weight": [c["vocab_size"], h], "model.norm.weight": [h],
         "lm_head.weight": [c["vocab_size"], h]}
    for i in range(c["num_hidden_layers"] + c["num_nextn_predict_layers"]):
        p = f"model.layers.{i}."
        if i >= c["num_hidden_layers"]:  # an MTP module: a decoder layer and these
            s.update({p + "enorm.weight": [h], p + "hnorm.weight": [h], p + "eh_proj.weight": [h, 2 * h],
                      p + "shared_head.norm.weight": [h], p + "embed_tokens.weight": [c["vocab_size"], h],
                      p + "shared_head.head.weight": [c["vocab_size"], h]})
        a = p + "self_attn."
        if c["q_lora_rank"]:
            s.update({a + "q_a_proj.weight": [c["q_lora_rank"], h], a + "q_a_layernorm.weight": [c["q_lora_rank"]],
                      a + "q_b_proj.weight": [nh * qk, c["q_lora_rank"]]})
        else:
            s[a + "q_proj.weight"] = [nh * qk, h]
        s.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                  a + "kv_a_proj_with_mqa.weight": [c["kv_lora_rank"] + c["qk_rope_head_dim"], h],
                  a + "kv_a_layernorm.weight": [c["kv_lora_rank"]],
                  a + "kv_b_proj.weight": [nh * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]],
                  a + "o_proj.weight": [h, nh * c["v_head_dim"]]})
        mlps = [(p + "mlp.", c["intermediate_size"])]
        if i >= c["first_k_dense_replace"]:
            m = c["moe_intermediate_size"]
            mlps = [(f"{p}mlp.experts.{e}.", m) for e in range(c["n_routed_experts"])]
            mlps.append((p + "mlp.shared_experts.", m * c["n_shared_experts"]))
            s[p + "mlp.gate.weight"] = [c["n_routed_experts"], h]
            if c["architectures"] == ["DeepseekV3ForCausalLM"]:
                s[p + "mlp.gate.e_score_correction_bias"] = [c["n_routed_experts"]]
        for q, width in mlps:
            s.update({q + "gate_proj.weight": [width, h], q + "up_proj.weight": [width, h],
                      q + "down_proj.weight": [h, width]})
    return s


def write_safetensors(path, tensors):
    """uint8 tensors are written as F8_E4M3 (their bit patterns)."""
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        dtype = {torch.bfloat16: "BF16", torch.float32: "F32", torch.uint8: "F8_E4M3"}[t.dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def quantize_fp8(tensors, block):
    """DeepSeek-V3's FP8 release: each projection weight as F8_E4M3 with an fp32 weight_scale_inv per block.
    Random bit patterns of exponents 5 to 8 (values of magnitude 1/4 to 4, no NaN) times random scales near
    0.1 stand for the quantised weights; the other tensors stay bf16 or fp32."""
    for name in [k for k in tensors if k.endswith("_proj.weight")]:
        rows, cols = tensors[name].shape
        sign, exponent, mantissa = (torch.randint(0, 2, (rows, cols)), torch.randint(5, 9, (rows, cols)),
                                    torch.randint(0, 8, (rows, cols)))
        tensors[name] = (sign * 128 + exponent * 8 + mantissa).to(torch.uint8)
        blocks = (-(-rows // block), -(-cols // block))
        tensors[name + "_scale_inv"] = 0.05 * (1 + torch.rand(blocks))


# DeepseekV2ForCausalLM (DeepSeek-V2-Lite's form): no query compression, softmax routing within the 2 of 4
# groups of highest maximum, top 2, not renormalised, times routed_scaling_factor; no correction bias or MTP.
V2 = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "q_lora_rank": None,
      "num_nextn_predict_layers": 0, "num_experts_per_tok": 2, "topk_method": "group_limited_greedy",
      "scoring_func": "softmax", "norm_topk_prob": False, "routed_scaling_factor": 2.0}


def main():
    fp8, v2 = "--fp8" in sys.argv, "--v2" in sys.argv
    args = [a for a in sys.argv[1:] if a not in ("--fp8", "--v2")]
    if v2:
        CONFIG.update(V2)
    out = args[0]
    torch.manual_seed(int(args[1]) if len(args) > 1 else 0)
    os.makedirs(out, exist_ok=True)
    tensors = {}
    for name, shape in shapes(CONFIG).items():
        if name.endswith("e_score_correction_bias"):
            tensors[name] = (0.05 * torch.randn(shape)).float()
        elif name.endswith("norm.weight"):
            tensors[name] = (1 + 0.1 * torch.randn(shape)).bfloat16()
        else:  # large enough that attention and routing are far from uniform
            tensors[name] = (0.2 * torch.randn(shape)).bfloat16()
    for k in range(CONFIG["num_nextn_predict_layers"]):  # the MTP layers' copies of the shared tensors
        p = f"model.layers.{CONFIG['num_hidden_layers'] + k}."
        tensors[p + "embed_tokens.weight"] = tensors["model.embed_tokens.weight"]
        tensors[p + "shared_head.head.weight"] = tensors["lm_head.weight"]
    config = dict(CONFIG)
    if fp8:  # blocks of 16 x 16 so that the toy's weights have several
        quantize_fp8(tensors, 16)
        config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                         "weight_block_size": [16, 16]}
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main()
