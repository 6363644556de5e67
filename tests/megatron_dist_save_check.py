#!/usr/bin/python3
"""Reads a torch_dist checkpoint written by `tessera convert --saver megatron --ckpt-format torch_dist` with PyTorch's
own DCP reader (FileSystemReader and load_state_dict into preallocated tensors, no process group) and checks it
against the Tessera checkpoint it came from, for tests/megatron_dist_save_cli.sh:

  * .metadata is the Metadata of PyTorch 2.x's torch.distributed.checkpoint (the class paths Megatron-Core loads
    through); Debian's PyTorch 1.13 has the same classes under torch.distributed._shard.*, so its reader maps the
    module paths (and nothing else) when it unpickles it;
  * every tensor key loads, and equals the Tessera tensors it was made of: stacked keys decoder.layers.<name>
    [num_layers, ...] (or per-layer keys decoder.layers.N.<name> with --per-layer), the experts as
    decoder.layers.mlp.experts.experts.<name> [layers, experts, ...], SwiGLU's fc1 as [all gates; all ups], the
    vocabulary padded with zero rows; a multi-token prediction module's layer under its own unstacked keys
    mtp.layers.K.transformer_layer.<name> (its experts [experts, ...]); no key is left over;
  * each chunk is one tensor rank's shard (the chunk count per key is given by the split);
  * the keys are stacked or per-layer as Megatron-Core's rule has them for the args' moe_layer_freq (a list or an
    int above 1: per layer);
  * common.pt (torch.load) holds the args (ckpt_format torch_dist, the layout) and the iteration; metadata.json names
    torch_dist; each rank's rng_state ShardedObject is Megatron's seeding of that rank (megatron_rng_check.py).

usage: megatron_dist_save_check.py DIR TESSERA_DIR TP PP EP [--per-layer]
"""
import io
import json
import os
import pickle
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import megatron_fixture  # noqa: E402,F401  (lets Python 3.11 import torch 1.13's DCP module)
import megatron_resume_fixture as rf  # noqa: E402
from megatron_rng_check import check_rng_state  # noqa: E402
import torch  # noqa: E402

try:  # PyTorch 2.x: the paths as written
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import metadata as md
    RENAMES = {}
except (ImportError, AttributeError):  # 1.13: the same classes under torch.distributed._shard
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard.checkpoint import metadata as md
    RENAMES = {("torch.distributed.checkpoint.metadata", "TensorProperties"):
               ("torch.distributed._shard.sharded_tensor.metadata", "TensorProperties"),
               ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"):
               ("torch.distributed._shard.sharded_tensor.metadata", "MEM_FORMAT_ENCODING")}


class Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if RENAMES:
            module, name = RENAMES.get((module, name), (module, name))
            module = module.replace("torch.distributed.checkpoint", "torch.distributed._shard.checkpoint")
        return super().find_class(module, name)


class Reader(dcp.FileSystemReader):
    def read_metadata(self):
        with open(os.path.join(self.path, ".metadata"), "rb") as f:
            return Unpickler(f).load()


def main():
    root, tessera, tp, pp, ep = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    per_layer = "--per-layer" in sys.argv
    iteration, index, w, _, _ = rf.read_tessera(tessera)
    d = os.path.join(root, f"iter_{iteration:07d}")
    with open(os.path.join(root, "latest_checkpointed_iteration.txt")) as f:
        assert int(f.read()) == iteration
    with open(os.path.join(d, "metadata.json")) as f:
        assert json.load(f)["sharded_backend"] == "torch_dist"
    common = torch.load(os.path.join(d, "common.pt"), map_location="cpu")
    a = common["args"]
    assert (a.ckpt_format, a.tensor_model_parallel_size, a.pipeline_model_parallel_size, common["iteration"]) == \
        ("torch_dist", tp, pp, iteration), vars(a)
    # Megatron-Core's TransformerBlock.sharded_state_dict asks for one key per layer when moe_layer_freq is a list
    # or an int above 1 (its non_homogeneous_layers), else for the layers stacked: the keys expected here must be
    # what a Megatron run with these args loads.
    freq = getattr(a, "moe_layer_freq", 1) if getattr(a, "num_experts", None) else 1
    assert (isinstance(freq, list) or freq > 1) == per_layer, ("moe_layer_freq", freq, "per-layer keys", per_layer)

    reader = Reader(d)
    meta = reader.read_metadata()
    assert type(meta).__name__ == "Metadata"
    state, chunks = {}, {}
    for key, m in meta.state_dict_metadata.items():
        if isinstance(m, md.BytesStorageMetadata):
            state[key] = io.BytesIO()
        else:
            state[key] = torch.empty(m.size, dtype=m.properties.dtype)
            chunks[key] = len(m.chunks)
    dcp.load_state_dict(state, storage_reader=reader, no_dist=True)

    c = index["args"]["model"]
    L, swiglu = c["num_layers"], c.get("swiglu", False)
    want = {}  # the sharded key -> the tensor it must equal, built from the Tessera tensors
    experts = {}
    for name, t in w.items():
        m = re.fullmatch(r"(decoder|encoder)\.layers\.(\d+)\.(.*)", name)  # a BERT's stack is its encoder
        mtp = re.fullmatch(r"(mtp\.layers\.\d+\.transformer_layer)\.(.*)", name)  # never stacked
        if not m and not mtp:
            want[name] = t
            continue
        stack, layer, rest = (m.group(1), int(m.group(2)), m.group(3)) if m else (mtp.group(1), 0, mtp.group(2))
        e = re.fullmatch(r"mlp\.experts\.local_experts\.(\d+)\.(.*)", rest)
        key = f"mlp.experts.experts.{e.group(2)}" if e else rest
        if mtp:
            key = f"{stack}.{key}"
        else:
            key = f"{stack}.layers.{layer}.{key}" if per_layer else f"{stack}.layers.{key}"
        if e:
            experts.setdefault(key, {}).setdefault(layer, {})[int(e.group(1))] = t
        else:
            want.setdefault(key, {})[layer] = t
    for key, layers in experts.items():
        want[key] = {l: torch.stack([g[i] for i in sorted(g)]) for l, g in layers.items()}
    for key in list(want):
        if isinstance(want[key], dict):
            layers = want[key]
            one_layer = per_layer or key.startswith("mtp.")
            want[key] = layers[next(iter(layers))] if one_layer else torch.stack([layers[l] for l in range(L)])
    names = sorted(k for k in state if not k.startswith("rng_state/"))
    assert names == sorted(want), (names, sorted(want))
    for key in names:
        got, expected = state[key].float(), want[key].float()
        if key in ("embedding.word_embeddings.weight", "output_layer.weight", "output_layer.bias"):  # padded for tp
            rows = min(got.shape[0], expected.shape[0])
            assert torch.equal(got[:rows], expected[:rows]) and not got[rows:].any(), key
            continue
        assert got.shape == expected.shape and torch.equal(got, expected), (key, got.shape, expected.shape)
        one = key.split("coder.layers.")[-1].split(".", 1)[-1] if per_layer else key
        # Split over the tensor ranks: the dense and expert MLPs, attention, multi-latent attention's up
        # projections (the down projections are whole on every rank), MTP's eh_proj.
        split = one.endswith(("linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "linear_fc1.bias",
                              "linear_proj.weight", "linear_fc2.weight", "linear_q_up_proj.weight",
                              "linear_kv_up_proj.weight", "linear_q_proj.weight", "eh_proj.weight"))
        per = (2 if swiglu and "linear_fc1." in key else 1) * (tp if split else 1)
        per *= (L if not per_layer and key.startswith(("decoder.layers.", "encoder.layers.")) else 1)
        stacked = not per_layer and not key.startswith("mtp.")
        per *= (want[key].shape[1 if stacked else 0] if ".experts.experts." in key else 1)
        assert chunks[key] == per, (key, chunks[key], per)
    seeds = 0
    for key, buf in state.items():
        if key.startswith("rng_state/"):
            coords = [int(x) for x in key.split("_")[2].split(".")]
            # DCP's loader torch.loads a bytes item into the state dict (1.13), or into the BytesIO given (2.x).
            rng = torch.load(io.BytesIO(buf.getvalue()), map_location="cpu") if isinstance(buf, io.BytesIO) else buf
            check_rng_state(rng, a.seed, coords[0], coords[1], ep_rank=coords[2] if len(coords) > 2 else 0, where=key)
            seeds += 1
    assert seeds == tp * pp * ep, seeds
    print(f"torch {torch.__version__}: {len(names)} tensor keys loaded by DCP's FileSystemReader equal Tessera's; "
          f"{sum(chunks.values())} chunks; {seeds} rng_state objects; common.pt args {a.ckpt_format} tp {tp} pp {pp}")


if __name__ == "__main__":
    main()
