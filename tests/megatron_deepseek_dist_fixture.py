#!/usr/bin/python3
"""A Megatron-LM torch_dist checkpoint of a DeepSeek-V3-style GPT for tests/megatron_deepseek_dist_cli.sh, written by
PyTorch's own DCP writer (tests/megatron_fixture.py's write_dcp, driven as the 4 ranks of a tensor 2 x pipeline 2 job)
from the weights and Adam's moments of a Tessera checkpoint, so that loading it must give Tessera's model back.

The keys are those Megatron-Core's sharded state dict gives such a model with Transformer Engine's spec:
  * --moe-layer-freq is a list, so TransformerBlock writes per-layer keys decoder.layers.N.* (N global, no layer
    axis): multi-latent attention (linear_q_down_proj / linear_kv_down_proj whole, the up projections and
    linear_q_proj chunked by rows with the latents' norms fused in as layer_norm_weight, linear_proj by columns),
    the dense first layer's pre-MLP norm fused into linear_fc1, SwiGLU's fc1 as a gate chunk and an up chunk per
    tensor rank;
  * the experts as SequentialMLP's decoder.layers.N.mlp.experts.experts.<name> with a leading axis of the experts,
    the shared expert as a dense MLP, router.weight and router.expert_bias whole (and local_tokens_per_expert, the
    persistent buffer of Megatron-Core before 0.11, zero);
  * the multi-token prediction module on the last stage: mtp.layers.0.{enorm,hnorm,final_layernorm}.weight, eh_proj
    by rows, and its layer under mtp.layers.0.transformer_layer.* unstacked (Megatron-Core's MTP block hands its
    layers no offset; the module's name is transformer_layer, as MultiTokenPredictionLayer maps mtp_model_layer);
    the last stage's copy of the word embeddings is a replica of the same key, so it is written once (stage 0);
  * Adam's moments as optimizer.state.exp_avg.<key> / optimizer.state.exp_avg_sq.<key>, chunked as the weights
    (--dist-ckpt-optim-fully-reshardable); none for the expert bias, a buffer outside the optimizer; common.pt with
    the args (ckpt_format torch_dist), iteration and the optimizer's common_step.

usage: megatron_deepseek_dist_fixture.py TESSERA_DIR OUT_DIR
"""
import argparse
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import megatron_fixture as mf  # noqa: E402  (lets Python 3.11 import torch 1.13's DCP module)
import megatron_deepseek_fixture as ds  # noqa: E402
import torch  # noqa: E402

TP, PP = ds.TP, ds.PP


def sharded_key(name, dense_layers):
    """Megatron-Core's sharded key for a Tessera name, and the global expert (-1: none)."""
    m = re.fullmatch(r"decoder\.layers\.(\d+)\.(.*)", name)
    mtp = re.fullmatch(r"(mtp\.layers\.\d+\.transformer_layer)\.(.*)", name)
    if not m and not mtp:
        return name, -1
    head, rest, dense = (f"decoder.layers.{m.group(1)}", m.group(2), int(m.group(1)) in dense_layers) if m else \
        (mtp.group(1), mtp.group(2), False)
    e = re.fullmatch(r"mlp\.experts\.local_experts\.(\d+)\.(.*)", rest)
    if e:
        return f"{head}.mlp.experts.experts.{e.group(2)}", int(e.group(1))
    return f"{head}.{ds.layer_key(rest, dense)}", -1


def stage_of(name, L):
    if name.startswith("decoder.layers."):
        return int(name.split(".")[2]) // (L // PP)
    return 0 if name.startswith("embedding.") else PP - 1


def chunks(name, t, rank):
    """Tensor rank `rank`'s chunks of the whole tensor `t`: [(offsets, chunk)], none where replicated and rank > 0."""
    shard = ds.shard(name, t, rank)
    zeros = [0] * t.dim()
    if shard.shape == t.shape:
        return [(zeros, shard)] if rank == 0 else []
    if name.endswith("linear_fc1.weight"):  # SwiGLU: the rank's gate rows, then its up rows
        half, ffn = shard.shape[0] // 2, t.shape[0] // 2
        return [([rank * half] + zeros[1:], shard[:half]), ([ffn + rank * half] + zeros[1:], shard[half:])]
    dim = 0 if shard.shape[0] != t.shape[0] else 1
    offsets = list(zeros)
    offsets[dim] = rank * shard.shape[dim]
    return [(offsets, shard)]


def items(w, L, dense_layers, prefix="", skip_buffers=False):
    """Each rank's (key, global size, offsets, chunk) for the tensors `w`, experts stacked on their axis."""
    num_experts = 1 + max((int(x) for n in w for x in re.findall(r"local_experts\.(\d+)\.", n)), default=-1)
    ranks = [[] for _ in range(TP * PP)]
    for name, t in w.items():
        if skip_buffers and name.endswith("router.expert_bias"):
            continue
        key, expert = sharded_key(name, dense_layers)
        stage = stage_of(name, L)
        lead, lead_offsets = ([num_experts], [expert]) if expert >= 0 else ([], [])
        for r in range(TP):
            for offsets, chunk in chunks(name, t, r):
                chunk = chunk.reshape([1] * len(lead) + list(chunk.shape)).float().contiguous().clone()
                ranks[stage * TP + r].append((prefix + key, lead + list(t.shape), lead_offsets + offsets, chunk))
        if name.endswith("router.expert_bias") and not prefix:  # Megatron-Core < 0.11's buffer, zero at a save
            ranks[stage * TP].append((key.replace("expert_bias", "local_tokens_per_expert"), list(t.shape),
                                      [0] * t.dim(), torch.zeros_like(t)))
    return ranks


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tessera")
    p.add_argument("out")
    a = p.parse_args()
    iteration, index, w, avg, sq, args, dense_layers = ds.read_model(a.tessera)
    args.ckpt_format = "torch_dist"
    L = args.num_layers
    ranks = items(w, L, dense_layers)
    for moments, prefix in ((avg, "optimizer.state.exp_avg."), (sq, "optimizer.state.exp_avg_sq.")):
        for r, extra in enumerate(items(moments, L, dense_layers, prefix, skip_buffers=True)):
            ranks[r] += extra
    d = os.path.join(a.out, f"iter_{iteration:07d}")
    mf.write_dcp(d, ranks)
    steps = index.get("optimizer_steps", iteration)
    torch.save({"args": args, "checkpoint_version": 3.0, "iteration": iteration,
                "optimizer": {"optimizer": {"param_groups": [{"lr": 1e-3, "wd_mult": 1.0}, {"lr": 1e-3, "wd_mult": 0.0}],
                                            "state": {"common_step": steps}}},
                "opt_param_scheduler": {"num_steps": iteration * 4, "max_lr": 1e-3}}, os.path.join(d, "common.pt"))
    with open(os.path.join(d, "metadata.json"), "w") as f:
        f.write('{"sharded_backend": "torch_dist", "sharded_backend_version": 1, '
                '"common_backend": "torch", "common_backend_version": 1}')
    with open(os.path.join(a.out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))
    keys = sorted({k for r in ranks for k, *_ in r if not k.startswith("optimizer.")})
    print(f"{a.out}: torch_dist at tensor {TP} x pipeline {PP}, {len(keys)} model keys: {' '.join(keys)}")


if __name__ == "__main__":
    main()
