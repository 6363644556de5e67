"""Checks a Megatron legacy checkpoint written by `tessera convert --saver megatron` with PyTorch itself
(tests/megatron_save_cli.sh): every rank's model_optim_rng.pt loads with torch.load, holds the keys, shapes
and dtypes Megatron-Core's GPTModel (local spec) or the legacy GPTModel has for the saved args, and its
shards merged back as Megatron's own converters merge them equal the Tessera checkpoint's tensors.

usage: megatron_save_check.py MEGATRON_DIR TESSERA_SAFETENSORS TP PP DTYPE(float32|bfloat16) NAMES(mcore|legacy)
"""
import argparse
import collections
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_reference import read_safetensors  # noqa: E402
from megatron_rng_check import check_rng_state  # noqa: E402

root, tessera_file, tp, pp, dtype, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
dtype = getattr(torch, dtype)


def load(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # a PyTorch without weights_only
        return torch.load(path, map_location="cpu")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
    iteration = int(f.read().strip())
iter_dir = os.path.join(root, f"iter_{iteration:07d}")


def rank_file(t, p):
    name = f"mp_rank_{t:02d}" if pp == 1 else f"mp_rank_{t:02d}_{p:03d}"
    return os.path.join(iter_dir, name, "model_optim_rng.pt")


def flatten(d, prefix=""):
    out = collections.OrderedDict()
    for k, v in d.items():
        key = prefix + k
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


# The state dict Megatron's GPTModel has on stage p (local spec): names and shard shapes for the args.
def expected_keys(a, p):
    h, kv, heads = a.hidden_size, a.kv_channels, a.num_attention_heads
    groups = a.num_query_groups if a.group_query_attention else heads
    vocab = a.vocab_size + 1 if a.tokenizer_type == "NullTokenizer" else None
    multiple = a.make_vocab_size_divisible_by * a.tensor_model_parallel_size
    padded = (vocab + multiple - 1) // multiple * multiple
    if padded != a.padded_vocab_size:
        fail(f"padded_vocab_size {a.padded_vocab_size}, Megatron pads {vocab} to {padded}")
    t = a.tensor_model_parallel_size
    norm_bias = a.normalization == "LayerNorm"
    bias = a.add_bias_linear
    keys = collections.OrderedDict()
    if p == 0:
        keys["embedding.word_embeddings.weight"] = (padded // t, h)
        if a.position_embedding_type == "learned_absolute":
            keys["embedding.position_embeddings.weight"] = (a.max_position_embeddings, h)
    per_stage = a.num_layers // a.pipeline_model_parallel_size
    for i in range(per_stage):
        L = f"decoder.layers.{i}."
        def add(name, shape, with_bias=None, bias_shape=None):
            keys[L + name + ".weight"] = shape
            if with_bias:
                keys[L + name + ".bias"] = bias_shape
        add("input_layernorm", (h,), norm_bias, (h,))
        qkv = (heads + 2 * groups) * kv // t
        add("self_attention.linear_qkv", (qkv, h), bias, (qkv,))
        add("self_attention.linear_proj", (h, heads * kv // t), bias, (h,))
        add("pre_mlp_layernorm", (h,), norm_bias, (h,))
        fc1 = a.ffn_hidden_size * (2 if a.swiglu else 1) // t
        add("mlp.linear_fc1", (fc1, h), bias, (fc1,))
        add("mlp.linear_fc2", (h, a.ffn_hidden_size // t), bias, (h,))
    if p == a.pipeline_model_parallel_size - 1:
        keys["decoder.final_layernorm.weight"] = (h,)
        if norm_bias:
            keys["decoder.final_layernorm.bias"] = (h,)
        if a.untie_embeddings_and_output_weights or a.pipeline_model_parallel_size > 1:
            keys["output_layer.weight"] = (padded // t, h)
    return keys, per_stage


# The legacy GPTModel's names for Megatron-Core's (as Megatron's loader_megatron.py reads them).
LEGACY = [("input_layernorm.", "input_norm."), ("self_attention.linear_qkv.", "self_attention.query_key_value."),
          ("self_attention.linear_proj.", "self_attention.dense."), ("pre_mlp_layernorm.", "post_attention_norm."),
          ("mlp.linear_fc1.", "mlp.dense_h_to_4h."), ("mlp.linear_fc2.", "mlp.dense_4h_to_h.")]


def legacy_name(key, tied_copy):
    if key == "output_layer.weight":
        return "word_embeddings_for_head.weight" if tied_copy else "language_model.output_layer.weight"
    if key.startswith("embedding."):
        return "language_model." + key
    if key.startswith("decoder.final_layernorm."):
        return "language_model.encoder.final_norm." + key.split(".")[-1]
    parts = key.split(".", 3)
    rest = parts[3]
    for a, b in LEGACY:
        if rest.startswith(a):
            rest = b + rest[len(a):]
    return f"language_model.encoder.layers.{parts[2]}.{rest}"


shards = collections.defaultdict(list)  # global Megatron-Core name -> [tp shards]
first_args = None
for p in range(pp):
    for t in range(tp):
        path = rank_file(t, p)
        d = load(path)
        if list(d) != ["args", "checkpoint_version", "iteration", "model", "rng_state"]:
            fail(f"{path}: top-level keys {list(d)}")
        if d["checkpoint_version"] != 3.0 or d["iteration"] != iteration:
            fail(f"{path}: checkpoint_version {d['checkpoint_version']}, iteration {d['iteration']}")
        a = d["args"]
        if not isinstance(a, argparse.Namespace) or not isinstance(d["model"], collections.OrderedDict):
            fail(f"{path}: args {type(a)}, model {type(d['model'])}")
        if (a.tensor_model_parallel_size, a.pipeline_model_parallel_size) != (tp, pp):
            fail(f"{path}: args layout {a.tensor_model_parallel_size}x{a.pipeline_model_parallel_size}")
        if a.params_dtype != dtype or a.bf16 != (dtype == torch.bfloat16):
            fail(f"{path}: params_dtype {a.params_dtype}, bf16 {a.bf16}")
        first_args = first_args or a
        try:
            check_rng_state(d["rng_state"], a.seed, p, t, where=path)
        except AssertionError as e:
            fail(str(e))
        if vars(a) != vars(first_args):
            fail(f"{path}: args differ from the first file's")
        want, per_stage = expected_keys(a, p)
        tied_copy = not a.untie_embeddings_and_output_weights
        if names == "legacy":
            want = collections.OrderedDict((legacy_name(k, tied_copy), v) for k, v in want.items())
        model = flatten(d["model"])
        if list(model) != list(want):
            fail(f"{path}: keys\n  {list(model)}\nexpected\n  {list(want)}")
        for k, shape in want.items():
            v = model[k]
            if tuple(v.shape) != shape or v.dtype != dtype or not v.is_contiguous():
                fail(f"{path}: {k} is {tuple(v.shape)} {v.dtype}, expected {shape} {dtype}")
        mcore = list(expected_keys(a, p)[0])
        for k, lk in zip(mcore, want):
            g = k
            if k.startswith("decoder.layers."):
                parts = k.split(".", 3)
                g = f"decoder.layers.{int(parts[2]) + p * per_stage}.{parts[3]}"
            if k == "output_layer.weight" and tied_copy:
                g = "tied_copy"
            shards[g].append(model[lk])

# Merge as Megatron's converters do and compare with the Tessera checkpoint.
tessera = read_safetensors(tessera_file)
a = first_args
for name, parts in shards.items():
    if name.endswith("linear_fc1.weight") or name.endswith("linear_fc1.bias"):
        if a.swiglu:
            halves = [torch.chunk(x, 2, dim=0) for x in parts]
            merged = torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
        else:
            merged = torch.cat(parts, dim=0)
    elif name.endswith("linear_proj.weight") or name.endswith("linear_fc2.weight"):
        merged = torch.cat(parts, dim=1)
    elif name in ("embedding.word_embeddings.weight", "output_layer.weight", "tied_copy") or "linear_qkv" in name:
        merged = torch.cat(parts, dim=0)
    else:
        if any(not torch.equal(x, parts[0]) for x in parts):
            fail(f"{name}: the replicated tensor differs between tensor ranks")
        merged = parts[0]
    source = tessera["embedding.word_embeddings.weight" if name == "tied_copy" else name].to(dtype)
    if name in ("embedding.word_embeddings.weight", "output_layer.weight", "tied_copy"):
        rows = min(source.shape[0], merged.shape[0])
        if merged[rows:].abs().sum() != 0:
            fail(f"{name}: the added padding rows are not zero")
        merged, source = merged[:rows], source[:rows]
    if not torch.equal(merged, source):
        fail(f"{name}: the merged shards differ from the Tessera tensor by {(merged.float() - source.float()).abs().max()}")
want_names = set(tessera) | ({"tied_copy"} if pp > 1 and not a.untie_embeddings_and_output_weights else set())
if set(shards) != want_names:
    fail(f"tensors {sorted(set(shards) ^ want_names)} are in only one of the two checkpoints")
print(f"torch {torch.__version__}: {tp * pp} files, {len(shards)} tensors as Megatron expects, merged equal to Tessera's; "
      f"each file's rng_state as Megatron seeds that rank for seed {a.seed}")
