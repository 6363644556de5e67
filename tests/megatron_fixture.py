#!/usr/bin/python3
"""Megatron-LM legacy checkpoints for tests/megatron_convert_cli.sh, written as Megatron writes them, and
the loss of a plain PyTorch forward over their merged weights.

Makes the whole weights of a small GPT (GPT-2 style: learned positions, LayerNorm with biases, GELU,
tied output; or Llama style: RoPE, RMSNorm, SwiGLU, grouped-query attention, untied output, no biases),
splits them over tensor ranks as Megatron's parallel layers hold them (column-parallel QKV/fc1 and the
vocabulary-parallel embedding and output layer by rows, with SwiGLU's fc1 shard [gate shard; up shard];
row-parallel linear_proj/fc2 by columns; the rest whole) and its layers over pipeline stages (local
layer numbers in each), and torch.saves iter_NNNNNNN/mp_rank_TT_PPP/model_optim_rng.pt with an
OrderedDict state dict under "model" ("model0", "model1", ... with virtual stages), the args as an
argparse.Namespace, iteration, checkpoint_version 3.0, RNG and optimizer state, plus
latest_checkpointed_iteration.txt. Key schemes: Megatron-Core's local spec ("mcore"), its Transformer
Engine spec ("te": norms fused into linear_qkv / linear_fc1, _extra_state entries) or the legacy
model's nested language_model.* ("legacy").

usage: megatron_fixture.py OUT_DIR STYLE(gpt2|llama) SCHEME(mcore|te|legacy) TOKENS [options]
  --dtype float32|bfloat16|float16   how the weights are stored (the reference uses the stored values)
  --vp N                             virtual pipeline chunks per stage
  --pp N                             pipeline stages (1: Megatron names the directories mp_rank_TT)
  --release                          a release checkpoint (release/, tracker 'release')
  --set NAME=PYTHON_VALUE            change one saved arg (after the weights are made)
  --drift-tied-copy                  the last stage's copy of tied embeddings off by 0.25 in one element
  --format torch|torch_dist          the legacy files (default) or Megatron's torch_dist: metadata.json,
                                     common.pt (args, iteration) and PyTorch DCP's .metadata and
                                     __R_0.distcp written by PyTorch's own FileSystemWriter
  --singleton                        torch_dist: SwiGLU's fc1 under the keys ..._w and ..._v
Prints the reference loss (mean next-token cross-entropy over the padded vocabulary, float64).
"""
import argparse
import ast
import collections
import io
import math
import os
import random
import sys

import dataclasses

# Debian's torch 1.13 on Python 3.11: its DCP module's dataclasses have defaults that Python 3.11 rejects as
# mutable (unhashable); letting such classes hash by identity first makes it importable, unchanged otherwise.
_process_class = dataclasses._process_class


def _hashable(cls, *args, **kwargs):
    made = _process_class(cls, *args, **kwargs)
    if made.__hash__ is None:
        made.__hash__ = object.__hash__
    return made


dataclasses._process_class = _hashable

import numpy as np
import torch

TP, ITERATION = 2, 20
PP = 2  # --pp changes it
RNG_SEED = None  # --rng-seed: the seed Megatron's CUDA generators were seeded with (none: no CUDA state saved)


def cuda_rng_state(seed):
    """torch.cuda.get_rng_state() after torch.cuda.manual_seed(seed): the Philox seed and offset 0, 16 bytes."""
    return torch.from_numpy(np.array([seed, 0], dtype="<u8").view(np.uint8).copy())


def rng_state(stage):
    """Megatron's get_rng_state list on pipeline stage `stage` (its _set_random_seed adds 100 x stage)."""
    state = {"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
             "torch_rng_state": torch.get_rng_state(), "rng_tracker_states": {}}
    if RNG_SEED is not None:
        state["cuda_rng_state"] = cuda_rng_state(RNG_SEED + 100 * stage)
        state["rng_tracker_states"] = {"model-parallel-rng": cuda_rng_state(RNG_SEED + 100 * stage + 2718)}
    return [state]


def config(style):
    c = dict(num_layers=4, hidden_size=32, num_attention_heads=4, seq_length=16, max_position_embeddings=16,
             vocab_size=40, make_vocab_size_divisible_by=8, kv_channels=8)
    c["padded_vocab_size"] = 48  # the NullTokenizer's 41 ids padded to a multiple of 8 x tp 2
    if style == "gpt2":
        c.update(ffn_hidden_size=64, group_query_attention=False, num_query_groups=None, swiglu=False,
                 position_embedding_type="learned_absolute", normalization="LayerNorm", add_bias_linear=True,
                 add_qkv_bias=True, untie_embeddings_and_output_weights=False)
    else:
        c.update(ffn_hidden_size=48, group_query_attention=True, num_query_groups=2, swiglu=True,
                 position_embedding_type="rope", normalization="RMSNorm", add_bias_linear=False,
                 add_qkv_bias=False, untie_embeddings_and_output_weights=True)
    return c


def make_weights(c, gen):
    """Whole tensors under Megatron-Core's local-spec names, global layer numbers."""
    h, d, heads = c["hidden_size"], c["kv_channels"], c["num_attention_heads"]
    groups = c["num_query_groups"] or heads
    ffn, bias, glu = c["ffn_hidden_size"], c["add_bias_linear"], c["swiglu"]
    ln_bias = c["normalization"] == "LayerNorm"

    def randn(*shape, std=0.2):
        return torch.randn(*shape, generator=gen) * std

    w = {"embedding.word_embeddings.weight": randn(c["padded_vocab_size"], h, std=0.5)}
    if c["position_embedding_type"] == "learned_absolute":
        w["embedding.position_embeddings.weight"] = randn(c["max_position_embeddings"], h, std=0.3)
    for i in range(c["num_layers"]):
        p = f"decoder.layers.{i}."
        for norm in ("input_layernorm", "pre_mlp_layernorm"):
            w[p + norm + ".weight"] = 1 + randn(h, std=0.1)
            if ln_bias:
                w[p + norm + ".bias"] = randn(h, std=0.1)
        w[p + "self_attention.linear_qkv.weight"] = randn((heads + 2 * groups) * d, h)
        w[p + "self_attention.linear_proj.weight"] = randn(h, heads * d)
        w[p + "mlp.linear_fc1.weight"] = randn((2 if glu else 1) * ffn, h)
        w[p + "mlp.linear_fc2.weight"] = randn(h, ffn)
        if bias:
            w[p + "self_attention.linear_qkv.bias"] = randn((heads + 2 * groups) * d, std=0.1)
            w[p + "self_attention.linear_proj.bias"] = randn(h, std=0.1)
            w[p + "mlp.linear_fc1.bias"] = randn((2 if glu else 1) * ffn, std=0.1)
            w[p + "mlp.linear_fc2.bias"] = randn(h, std=0.1)
    w["decoder.final_layernorm.weight"] = 1 + randn(h, std=0.1)
    if ln_bias:
        w["decoder.final_layernorm.bias"] = randn(h, std=0.1)
    if c["untie_embeddings_and_output_weights"]:
        w["output_layer.weight"] = randn(c["padded_vocab_size"], h, std=0.5)
    return w


# ---- the reference forward, float64, on whole tensors ----------------------------------------------

def norm(c, x, weight, bias):
    if c["normalization"] == "RMSNorm":
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * weight
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * weight + bias


def rope(x, positions, base=10000.0):
    """Megatron's (rotate-half) rotary embedding of x [T, heads, d]."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = positions[:, None].double() * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


def reference_loss(c, w, tokens, moe_mlp=None):
    """The LM loss of a plain float64 forward; a layer with a router computes moe_mlp(w, prefix, y) as its MLP."""
    w = {k: v.double() for k, v in w.items()}
    h, d, heads = c["hidden_size"], c["kv_channels"], c["num_attention_heads"]
    groups = c["num_query_groups"] or heads
    per_group, ffn = heads // groups, c["ffn_hidden_size"]
    ids = torch.tensor(tokens[:-1])
    labels = torch.tensor(tokens[1:])
    T = len(ids)
    pos = torch.arange(T)
    x = w["embedding.word_embeddings.weight"][ids]
    if "embedding.position_embeddings.weight" in w:
        x = x + w["embedding.position_embeddings.weight"][pos]

    def linear(name, y):
        out = y @ w[name + ".weight"].T
        return out + w[name + ".bias"] if name + ".bias" in w else out

    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(c["num_layers"]):
        p = f"decoder.layers.{i}."
        y = norm(c, x, w[p + "input_layernorm.weight"], w.get(p + "input_layernorm.bias"))
        qkv = linear(p + "self_attention.linear_qkv", y).view(T, groups, per_group + 2, d)
        q = qkv[:, :, :per_group].reshape(T, heads, d)  # head g * per_group + j
        k = qkv[:, :, per_group].repeat_interleave(per_group, dim=1)
        v = qkv[:, :, per_group + 1].repeat_interleave(per_group, dim=1)
        if c["position_embedding_type"] == "rope":
            q, k = rope(q, pos), rope(k, pos)
        scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(d)
        probs = scores.masked_fill(mask, float("-inf")).softmax(-1)
        attn = torch.einsum("hts,shd->thd", probs, v).reshape(T, heads * d)
        x = x + linear(p + "self_attention.linear_proj", attn)
        y = norm(c, x, w[p + "pre_mlp_layernorm.weight"], w.get(p + "pre_mlp_layernorm.bias"))
        if moe_mlp is not None and p + "mlp.router.weight" in w:
            x = x + moe_mlp(w, p, y)
            continue
        a = linear(p + "mlp.linear_fc1", y)
        if c["swiglu"]:
            a = torch.nn.functional.silu(a[:, :ffn]) * a[:, ffn:]
        else:
            a = torch.nn.functional.gelu(a, approximate="tanh")
        x = x + linear(p + "mlp.linear_fc2", a)
    x = norm(c, x, w["decoder.final_layernorm.weight"], w.get("decoder.final_layernorm.bias"))
    out = w.get("output_layer.weight", w["embedding.word_embeddings.weight"])
    return torch.nn.functional.cross_entropy(x @ out.T, labels).item()


# ---- Megatron's shards and files ---------------------------------------------------------------

def split(name, t, c, rank):
    """Tensor rank `rank`'s shard of the whole tensor `t`, as Megatron's parallel layers hold it."""
    def rows(x):
        return x.chunk(TP, dim=0)[rank]
    if name in ("embedding.word_embeddings.weight", "output_layer.weight") or "linear_qkv." in name:
        return rows(t)
    if "linear_fc1." in name:
        if c["swiglu"]:
            gate, up = t.chunk(2, dim=0)
            return torch.cat([rows(gate), rows(up)], dim=0)
        return rows(t)
    if name.endswith("linear_proj.weight") or name.endswith("linear_fc2.weight"):
        return t.chunk(TP, dim=1)[rank]
    return t


LEGACY_LAYER = {
    "input_layernorm.": "input_norm.", "pre_mlp_layernorm.": "post_attention_norm.",
    "self_attention.linear_qkv.": "self_attention.query_key_value.",
    "self_attention.linear_proj.": "self_attention.dense.",
    "mlp.linear_fc1.": "mlp.dense_h_to_4h.", "mlp.linear_fc2.": "mlp.dense_4h_to_h.",
}
TE_LAYER = {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
            "input_layernorm.bias": "self_attention.linear_qkv.layer_norm_bias",
            "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
            "pre_mlp_layernorm.bias": "mlp.linear_fc1.layer_norm_bias"}


def chunk_state(c, w, scheme, rank, layers, first, last, dtype):
    """The state dict of one model chunk (state_dict_for_save_checkpoint) at tensor rank `rank`."""
    def shard(name):
        return split(name, w[name], c, rank).to(dtype).clone()

    local = collections.OrderedDict()  # Megatron-Core names, local layer numbers
    if first:
        for name in ("embedding.word_embeddings.weight", "embedding.position_embeddings.weight"):
            if name in w:
                local[name] = shard(name)
    for j, i in enumerate(layers):
        for name in [n for n in w if n.startswith(f"decoder.layers.{i}.")]:
            local[f"decoder.layers.{j}." + name[len(f"decoder.layers.{i}."):]] = shard(name)
    if last:
        for name in ("decoder.final_layernorm.weight", "decoder.final_layernorm.bias"):
            if name in w:
                local[name] = shard(name)
        # An untied output layer, or on the last stage of a pipeline the copy of tied embeddings.
        if c["untie_embeddings_and_output_weights"]:
            local["output_layer.weight"] = shard("output_layer.weight")
        elif not first:
            local["output_layer.weight"] = shard("embedding.word_embeddings.weight")

    if scheme == "mcore":
        for j in range(len(layers)):
            local[f"decoder.layers.{j}.self_attention.core_attention._extra_state"] = None
        return local
    if scheme == "te":
        out = collections.OrderedDict()
        for key, t in local.items():
            if key.startswith("decoder.layers."):
                head, rest = key.split(".", 3)[:3], key.split(".", 3)[3]
                key = ".".join(head) + "." + TE_LAYER.get(rest, rest)
            out[key] = t
            if key.endswith("linear_fc2.weight"):
                out[key.replace(".weight", "._extra_state")] = io.BytesIO(b"te fp8 metadata")
        out["output_layer._extra_state"] = None
        return out
    # The legacy GPTModel: language_model -> embedding / encoder / output_layer, and on the last stage
    # of a pipeline the copy of tied embeddings as word_embeddings_for_head.
    lm = collections.OrderedDict()
    if first:
        emb = collections.OrderedDict()
        emb["word_embeddings"] = collections.OrderedDict(weight=local["embedding.word_embeddings.weight"])
        if "embedding.position_embeddings.weight" in local:
            emb["position_embeddings"] = collections.OrderedDict(weight=local["embedding.position_embeddings.weight"])
        lm["embedding"] = emb
    encoder = collections.OrderedDict()
    for key, t in local.items():
        if key.startswith("decoder.layers."):
            n, rest = key.split(".", 3)[2], key.split(".", 3)[3]
            for new, old in LEGACY_LAYER.items():
                if rest.startswith(new):
                    rest = old + rest[len(new):]
            encoder[f"layers.{n}.{rest}"] = t
        elif key.startswith("decoder.final_layernorm."):
            encoder["final_norm." + key.split(".")[-1]] = t
    lm["encoder"] = encoder
    model = collections.OrderedDict(language_model=lm)
    if last and c["untie_embeddings_and_output_weights"]:
        lm["output_layer"] = collections.OrderedDict(weight=local["output_layer.weight"])
    elif last and not first:
        model["word_embeddings_for_head"] = collections.OrderedDict(weight=local["output_layer.weight"])
    return model


# ---- torch_dist: PyTorch's own DCP writer, driven as Megatron's ranks drive it ----------------------

def dcp_modules():
    """PyTorch 2.x's torch.distributed.checkpoint, or 1.13's torch.distributed._shard.checkpoint (which
    Python 3.11 imports only when dataclasses let its mutable defaults through: see below)."""
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import default_planner, planner, metadata
        properties = metadata.TensorProperties
    except (ImportError, AttributeError):
        import torch.distributed._shard.checkpoint as dcp
        from torch.distributed._shard.checkpoint import default_planner, planner, metadata
        from torch.distributed._shard.sharded_tensor.metadata import TensorProperties as properties
    return dcp, default_planner, planner, metadata, properties


def write_dcp(path, ranks):
    """Writes ranks[r] = [(key, global size or None for an object, chunk offsets, tensor or object)] as
    DCP does for a job of len(ranks) processes: each rank's plan, the coordinator's global plan and
    metadata, each rank's __r_0.distcp by FileSystemWriter, then .metadata."""
    dcp, default_planner, planner, md, TensorProperties = dcp_modules()

    class RankPlanner(default_planner.DefaultSavePlanner):
        def __init__(self, items):
            super().__init__()
            self.items, self.objects = items, {}

        def create_local_plan(self):
            requests = []
            for key, size, offsets, obj in self.items:
                if size is None:
                    index = md.MetadataIndex(key)
                    requests.append(planner.WriteItem(index=index, type=planner.WriteItemType.BYTE_IO))
                else:
                    index = md.MetadataIndex(key, offsets)
                    chunk = md.ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=obj.size())
                    data = planner.TensorWriteData(chunk=chunk, properties=TensorProperties.create_from_tensor(obj),
                                                   size=torch.Size(size))
                    requests.append(planner.WriteItem(index=index, type=planner.WriteItemType.SHARD, tensor_data=data))
                self.objects[(key, None if size is None else tuple(offsets))] = obj
            self.plan = planner.SavePlan(requests)
            return self.plan

        def resolve_data(self, item):
            obj = self.objects[(item.index.fqn, None if item.index.offset is None else tuple(item.index.offset))]
            if item.type == planner.WriteItemType.BYTE_IO:
                buffer = io.BytesIO()
                torch.save(obj, buffer)
                return buffer
            return obj

    writer = dcp.FileSystemWriter(path, single_file_per_rank=True)
    planners = [RankPlanner(items) for items in ranks]
    plans = [writer.prepare_local_plan(p.create_local_plan()) for p in planners]
    plans, metadata = default_planner.create_default_global_save_plan(plans)
    plans = writer.prepare_global_plan(plans)
    results = []
    for p, plan in zip(planners, plans):
        p.finish_plan(plan)
        future = writer.write_data(plan, p)
        future.wait()
        results.append(future.value())
    writer.finish(metadata=metadata, results=results)


def torch_dist_items(c, w, scheme, dtype, singleton):
    """Each rank's sharded tensors (rank = stage * TP + tensor rank), as Megatron-Core's sharded state dict
    has them: layers stacked under decoder.layers.* with the global layer as the leading axis, each tensor
    rank's shard a chunk at its offsets, SwiGLU's fc1 as a gate chunk and an up chunk (or keys _w and _v
    with singleton_local_shards), replicated tensors saved once; the tied output layer folded into the
    embedding (not saved). Plus ShardedObjects (bytes) and optimizer entries, which a converter skips."""
    L = c["num_layers"]
    per_stage = L // PP
    ranks = [[] for _ in range(TP * PP)]

    def rename(rest):
        return TE_LAYER.get(rest, rest) if scheme == "te" else rest

    def add(rank, key, size, offsets, t):
        ranks[rank].append((key, list(size), list(offsets), t.to(dtype).contiguous().clone()))

    for name, t in w.items():
        if not name.startswith("decoder.layers."):
            continue
        i, rest = name.split(".", 3)[2:]
        layer, stage = int(i), int(i) // per_stage
        key = "decoder.layers." + rename(rest)
        size = [L] + list(t.shape)
        for r in range(TP):
            shard = split(name, t, c, r)
            zeros = [0] * t.dim()
            if "linear_fc1." in rest and c["swiglu"]:
                half, ffn = shard.shape[0] // 2, t.shape[0] // 2  # a shared expert's is its own size
                gate, up = shard[:half], shard[half:]
                if singleton:
                    gsize = [L, ffn] + list(t.shape[1:])
                    add(stage * TP + r, key + "_w", gsize, [layer, r * half] + zeros[1:], gate.unsqueeze(0))
                    add(stage * TP + r, key + "_v", gsize, [layer, r * half] + zeros[1:], up.unsqueeze(0))
                else:
                    add(stage * TP + r, key, size, [layer, r * half] + zeros[1:], gate.unsqueeze(0))
                    add(stage * TP + r, key, size, [layer, ffn + r * half] + zeros[1:], up.unsqueeze(0))
            elif shard.shape == t.shape:  # replicated: tensor rank 0's copy
                if r == 0:
                    add(stage * TP, key, size, [layer] + zeros, shard.unsqueeze(0))
            else:
                dim = 0 if shard.shape[0] != t.shape[0] else 1
                off = list(zeros)
                off[dim] = r * shard.shape[dim]
                add(stage * TP + r, key, size, [layer] + off, shard.unsqueeze(0))
        if scheme == "te" and rest == "mlp.linear_fc2.weight":
            for r in range(TP):
                obj_key = f"decoder.layers.mlp.linear_fc2._extra_state/shard_{layer}.{r}_{L}.{TP}"
                ranks[stage * TP + r].append((obj_key, None, None, io.BytesIO(b"te fp8 metadata")))
    for name, stage in (("embedding.word_embeddings.weight", 0), ("embedding.position_embeddings.weight", 0),
                        ("decoder.final_layernorm.weight", PP - 1), ("decoder.final_layernorm.bias", PP - 1),
                        ("output_layer.weight", PP - 1)):
        if name not in w:
            continue
        t = w[name]
        for r in range(TP):
            shard = split(name, t, c, r)
            if shard.shape == t.shape:
                if r == 0:
                    add(stage * TP, name, t.shape, [0] * t.dim(), shard)
            else:
                add(stage * TP + r, name, t.shape, [r * shard.shape[0]] + [0] * (t.dim() - 1), shard)
    for rank in range(TP * PP):  # Megatron's ShardedObject over (pipeline, tensor)
        stage, r = divmod(rank, TP)
        ranks[rank].append((f"rng_state/shard_{stage}.{r}_{PP}.{TP}", None, None, rng_state(stage)))
    fc2 = w.get("decoder.layers.0.mlp.linear_fc2.weight")  # absent where the layer's MLP is experts
    if fc2 is not None:
        ranks[0].append(("optimizer.state.exp_avg.decoder.layers.mlp.linear_fc2.weight", [L] + list(fc2.shape),
                         [0] * (fc2.dim() + 1), torch.zeros(L, *fc2.shape)))
    return ranks


def write_torch_dist(out, sub, c, w, args, scheme, dtype, singleton, iteration):
    d = os.path.join(out, sub)
    write_dcp(d, torch_dist_items(c, w, scheme, dtype, singleton))
    common = {"args": args, "checkpoint_version": 3.0, "iteration": iteration,
              "opt_param_scheduler": {"num_steps": ITERATION * 32, "max_lr": 3e-4},
              "num_floating_point_operations_so_far": 0}
    torch.save(common, os.path.join(d, "common.pt"))
    with open(os.path.join(d, "metadata.json"), "w") as f:
        f.write('{"sharded_backend": "torch_dist", "sharded_backend_version": 1, '
                '"common_backend": "torch", "common_backend_version": 1}')


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("style", choices=["gpt2", "llama"])
    p.add_argument("scheme", choices=["mcore", "te", "legacy"])
    p.add_argument("tokens")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--vp", type=int, default=1)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--release", action="store_true")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--drift-tied-copy", action="store_true")
    p.add_argument("--format", default="torch", choices=["torch", "torch_dist"])
    p.add_argument("--singleton", action="store_true", help="torch_dist: SwiGLU's fc1 as keys _w and _v")
    p.add_argument("--rng-seed", type=int, help="save CUDA generator states seeded with this")
    a = p.parse_args()
    global PP, RNG_SEED
    PP = a.pp
    RNG_SEED = a.rng_seed
    dtype = getattr(torch, a.dtype)
    c = config(a.style)
    w = make_weights(c, torch.Generator().manual_seed(7))
    # The reference sees what the files hold: the weights rounded to the stored type.
    w = {k: v.to(dtype).float() for k, v in w.items()}
    tokens = [int(t) for t in a.tokens.split(",")]
    loss = reference_loss(c, w, tokens)

    saved = dict(c)
    saved.update(tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP,
                 virtual_pipeline_model_parallel_size=a.vp if a.vp > 1 else None, rotary_base=10000,
                 rotary_percent=1.0, rotary_interleaved=False, norm_epsilon=1e-5, apply_layernorm_1p=False,
                 qk_layernorm=False, num_experts=None, bias_gelu_fusion=True, openai_gelu=False, squared_relu=False,
                 hidden_dropout=0.0 if a.style == "llama" else 0.1, attention_dropout=0.0 if a.style == "llama" else 0.1,
                 init_method_std=0.02, tokenizer_type="NullTokenizer", vocab_file=None, merge_file=None,
                 tokenizer_model=None, consumed_train_samples=640, seed=1234, micro_batch_size=4,
                 global_batch_size=32, train_iters=100, lr=3e-4, fp16=a.dtype == "float16", bf16=a.dtype == "bfloat16",
                 params_dtype=dtype, iteration=ITERATION, use_checkpoint_args=False, ckpt_format="torch")
    for item in a.set:
        name, value = item.split("=", 1)
        saved[name] = ast.literal_eval(value)
    args = argparse.Namespace(**saved)

    layers_per_chunk = c["num_layers"] // (PP * a.vp)
    sub = "release" if a.release else f"iter_{ITERATION:07d}"
    if a.format == "torch_dist":
        args.ckpt_format = "torch_dist"
        write_torch_dist(a.out, sub, c, w, args, a.scheme, dtype, a.singleton, 0 if a.release else ITERATION)
        with open(os.path.join(a.out, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write("release" if a.release else str(ITERATION))
        print(f"reference loss: {loss:.12e}")
        return
    for stage in range(PP):
        for rank in range(TP):
            state = {"args": args, "checkpoint_version": 3.0, "iteration": 0 if a.release else ITERATION}
            for v in range(a.vp):
                start = (v * PP + stage) * layers_per_chunk
                chunk = chunk_state(c, w, a.scheme, rank, list(range(start, start + layers_per_chunk)),
                                    first=v == 0 and stage == 0, last=v == a.vp - 1 and stage == PP - 1, dtype=dtype)
                if a.drift_tied_copy and rank == 0 and "output_layer.weight" in chunk:
                    chunk["output_layer.weight"][3, 5] += 0.25
                state["model" if a.vp == 1 else f"model{v}"] = chunk
            params = [t for t in state.get("model", state.get("model0")).values() if isinstance(t, torch.Tensor)]
            state["optimizer"] = {"optimizer": {"state": {i: {"exp_avg": torch.zeros(4), "exp_avg_sq": torch.zeros(4),
                                                             "step": ITERATION} for i in range(2)},
                                                "param_groups": [{"lr": 3e-4, "params": [0, 1]}]},
                                  "fp32_from_fp16_params": [[t.float() for t in params[:2]]]}
            state["opt_param_scheduler"] = {"num_steps": ITERATION * 32, "max_lr": 3e-4}
            state["rng_state"] = rng_state(stage)
            d = os.path.join(a.out, sub, f"mp_rank_{rank:02d}" + (f"_{stage:03d}" if PP > 1 else ""))
            os.makedirs(d, exist_ok=True)
            torch.save(state, os.path.join(d, "model_optim_rng.pt"))
    with open(os.path.join(a.out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("release" if a.release else str(ITERATION))
    print(f"reference loss: {loss:.12e}")


if __name__ == "__main__":
    main()
