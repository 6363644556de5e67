#!/usr/bin/python3
"""A Megatron-LM legacy mixture-of-experts checkpoint for tests/megatron_moe_convert_cli.sh, made by PyTorch from
the weights of a Tessera checkpoint (a Llama-style model whose layers are MoE), so that converting it back must
give the same model.

Writes iter_N/mp_rank_TT_PPP_EEE/model_optim_rng.pt at tensor 2 x pipeline 2 x expert 2 as Megatron-Core's ranks
hold the model: the dense tensors split as tests/megatron_fixture.py splits them (every expert rank holds them),
the router whole (as the dense tensors are named), expert rank e holding experts [e * E/2, (e + 1) * E/2) under their local numbers, each split
over the tensor ranks as a dense MLP is; per-expert keys (SequentialMLP:
mlp.experts.local_experts.L.linear_fc1.weight) or Transformer Engine's grouped GEMM (TEGroupedMLP:
mlp.experts.linear_fc1.weightL).

With dist or dist_singleton, writes Megatron's torch_dist format instead (PyTorch's own DCP writer, as the
ranks of tensor 2 x pipeline 2 x expert 4 write it): the dense keys as tests/megatron_fixture.py writes them, the
experts as Megatron-Core's sharded state dict names them whatever the MLP class (SequentialMLP's, which
TEGroupedMLP's are made interchangeable with): decoder.layers.mlp.experts.experts.linear_fc1.weight stacked
[layers, experts, ...] with each expert's tensor-rank shard (SwiGLU's gate and up halves apart) a chunk, or
under singleton_local_shards one key per global expert, decoder.layers.mlp.experts.experts.G.linear_fc1.weight_w
/ _v; and Adam's moments as optimizer.state.exp_avg.<key> / exp_avg_sq.<key> entries of the same layout (the
fully reshardable format), with the step count in common.pt.

usage: megatron_moe_fixture.py TESSERA_DIR OUT_DIR=sequential|grouped|dist|dist_singleton[,NAME=PYTHON_VALUE...] ...
  (legacy: ",unchained" saves the dense optimizer's state dict alone, not the chained list)
"""
import argparse
import ast
import collections
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import megatron_fixture as mf  # noqa: E402
import megatron_resume_fixture as rf  # noqa: E402
from megatron_moe_reference import moe_mlp  # noqa: E402
import torch  # noqa: E402

EP = 2
EP_DIST = 4  # the torch_dist fixtures' expert ranks (another layout than the legacy ones')


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tessera")
    p.add_argument("specs", nargs="+", metavar="OUT_DIR=sequential|grouped[,NAME=PYTHON_VALUE...]",
                   help="one checkpoint per spec (one process, one torch import: the test's time); NAME=VALUE sets "
                        "an attribute of the saved args")
    p.add_argument("--reference-tokens", help="print each checkpoint's float64 reference loss on these tokens")
    a = p.parse_args()
    mf.TP, mf.PP = 2, 2
    iteration, index, w, avg, sq = rf.read_tessera(a.tessera)
    for spec in a.specs:
        out, _, rest = spec.partition("=")
        experts, *sets = rest.split(",")
        if experts in ("dist", "dist_singleton"):
            write_dist(out, experts == "dist_singleton", sets, iteration, index, w, avg, sq)
        elif experts in ("sequential", "grouped"):
            write(out, experts, sets, iteration, index, w, avg, sq)
        else:
            p.error(f"bad spec {spec}")
        print(f"{out}: {spec}")
        if a.reference_tokens:  # the routing the saved args describe, over the weights the files hold
            args, _ = moe_args(mf.config("llama"), w, iteration, index, "torch", EP, False,
                               [x for x in sets if x != "unchained"])
            margins = []
            tokens = [int(t) for t in a.reference_tokens.split(",")]
            loss = mf.reference_loss(mf.config("llama"), w, tokens, lambda ww, prefix, y: moe_mlp(args, ww, prefix, y, margins))
            print(f"{out}: reference loss: {loss!r} (smallest top-k margin {min(margins):.3g})")


def moe_args(c, w, iteration, index, fmt, ep, grouped, sets):
    num_experts = 1 + max(int(m.group(1)) for m in (re.search(r"local_experts\.(\d+)\.", k) for k in w) if m)
    args = rf.megatron_args(c, iteration, index, False, fmt)
    args.num_experts, args.moe_router_topk, args.moe_ffn_hidden_size = num_experts, 2, 16
    args.expert_model_parallel_size, args.moe_grouped_gemm = ep, grouped
    args.moe_router_load_balancing_type, args.moe_aux_loss_coeff = "aux_loss", 0.0
    for item in sets:
        name, value = item.split("=", 1)
        setattr(args, name, ast.literal_eval(value))
    return args, num_experts


def dist_items(c, tensors, prefix, singleton, num_experts, etp):
    """Each rank's DCP items (rank = (stage * EP_DIST + expert rank) * TP + tensor rank) of `tensors` (Tessera
    names) under Megatron-Core's sharded keys, each prefixed by `prefix` (an optimizer state's). The experts are
    split over `etp` expert tensor ranks (1: each expert whole, one chunk), the rest over TP."""
    L, TP, PP = c["num_layers"], mf.TP, mf.PP
    ranks = [[] for _ in range(PP * EP_DIST * TP)]
    dense = {k: v for k, v in tensors.items() if ".local_experts." not in k}
    for i, items in enumerate(mf.torch_dist_items(c, dense, "mcore", torch.float32, False)):
        stage, r = divmod(i, TP)
        ranks[stage * EP_DIST * TP + r] += [(prefix + k, s, o, t) for k, s, o, t in items
                                            if not k.startswith("optimizer.") and (s is not None or not prefix)]
    local = num_experts // EP_DIST
    for name, t in tensors.items():
        m = re.fullmatch(r"decoder\.layers\.(\d+)\.mlp\.experts\.local_experts\.(\d+)\.(linear_fc[12])\.weight", name)
        if not m:
            continue
        layer, g, fc = int(m.group(1)), int(m.group(2)), m.group(3)
        stage = layer // (L // PP)
        if singleton:
            key, size, lead = f"decoder.layers.mlp.experts.experts.{g}.{fc}.weight", [L], [layer]
        else:
            key, size, lead = f"decoder.layers.mlp.experts.experts.{fc}.weight", [L, num_experts], [layer, g]
        for r in range(etp):
            rank = (stage * EP_DIST + g // local) * TP + r
            shard = mf.split(f"decoder.layers.0.mlp.{fc}.weight", t, c, r) if etp == TP else t

            def add(k, whole, offsets, x):
                ranks[rank].append((prefix + k, size + whole, lead + offsets,
                                    x.reshape([1] * len(lead) + list(x.shape)).contiguous().clone()))
            if fc == "linear_fc1":  # [gate shard; up shard]: two chunks (or the keys _w and _v)
                half, ffn = shard.shape[0] // 2, t.shape[0] // 2
                if singleton:
                    add(key + "_w", [ffn, t.shape[1]], [r * half, 0], shard[:half])
                    add(key + "_v", [ffn, t.shape[1]], [r * half, 0], shard[half:])
                else:
                    add(key, list(t.shape), [r * half, 0], shard[:half])
                    add(key, list(t.shape), [ffn + r * half, 0], shard[half:])
            else:
                add(key, list(t.shape), [0, r * shard.shape[1]], shard)
    return ranks


def write_dist(out, singleton, sets, iteration, index, w, avg, sq):
    c = mf.config("llama")
    args, num_experts = moe_args(c, w, iteration, index, "torch_dist", EP_DIST, True, sets)
    etp = getattr(args, "expert_tensor_parallel_size", None) or mf.TP
    assert etp in (1, mf.TP), etp
    ranks = dist_items(c, w, "", singleton, num_experts, etp)
    for tensors, prefix in ((avg, "optimizer.state.exp_avg."), (sq, "optimizer.state.exp_avg_sq.")):
        for r, extra in enumerate(dist_items(c, tensors, prefix, singleton, num_experts, etp)):
            ranks[r] += extra
    d = os.path.join(out, f"iter_{iteration:07d}")
    mf.write_dcp(d, ranks)
    steps = index.get("optimizer_steps", iteration)
    torch.save({"args": args, "checkpoint_version": 3.0, "iteration": iteration,
                "optimizer": {"optimizer": {"param_groups": [{"lr": 1e-3}], "state": {"common_step": steps}}}},
               os.path.join(d, "common.pt"))
    with open(os.path.join(d, "metadata.json"), "w") as f:
        f.write('{"sharded_backend": "torch_dist", "sharded_backend_version": 1, '
                '"common_backend": "torch", "common_backend_version": 1}')
    with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))


def chained_optimizer(c, dense, model, layers, rank, first_expert, avg, sq, w, steps):
    """Megatron-Core's ChainedOptimizer state dict for a mixture of experts: [the dense parameters' torch
    optimizer state dict, the experts'], each numbering its parameters group by group in the file's
    named_parameters order (tests/megatron_resume_fixture.py's legacy_optimizer). The experts' keys are named
    here by their global numbers, which is what the moments are looked up by; the order is the file's."""
    experts = collections.OrderedDict()
    for key, t in model.items():
        m = re.fullmatch(r"decoder\.layers\.(\d+)\.mlp\.experts\.(?:local_experts\.(\d+)\.(linear_fc[12])\.weight|"
                         r"(linear_fc[12])\.weight(\d+))", key)
        if m:
            local, fc = (m.group(2), m.group(3)) if m.group(2) is not None else (m.group(5), m.group(4))
            experts[f"decoder.layers.{m.group(1)}.mlp.experts.local_experts.{first_expert + int(local)}.{fc}.weight"] = t
    return [rf.legacy_optimizer(dense, layers, rank, c, avg, sq, w, steps, False, False),
            rf.legacy_optimizer(experts, layers, rank, c, avg, sq, w, steps, False, False)]


def write(out, experts, sets, iteration, index, w, avg, sq):
    c = mf.config("llama")
    steps = index.get("optimizer_steps", iteration)
    unchained = "unchained" in sets
    sets = [x for x in sets if x != "unchained"]
    args, num_experts = moe_args(c, w, iteration, index, "torch", EP, experts == "grouped", sets)
    local = num_experts // EP
    dense = {k: v for k, v in w.items() if ".local_experts." not in k}
    per_stage = c["num_layers"] // mf.PP
    for stage in range(mf.PP):
        layers = list(range(stage * per_stage, (stage + 1) * per_stage))
        for rank in range(mf.TP):
            for e in range(EP):
                chunk = mf.chunk_state(c, dense, "mcore", rank, layers, first=stage == 0, last=stage == mf.PP - 1,
                                       dtype=torch.float32)
                model = collections.OrderedDict()
                for key, t in chunk.items():
                    model[key] = t
                    if not key.endswith("pre_mlp_layernorm.weight"):
                        continue
                    j = int(key.split(".")[2])  # the local layer, after whose norm its MLP's keys come
                    prefix = f"decoder.layers.{j}.mlp."
                    for g in range(e * local, (e + 1) * local):
                        for fc in ("linear_fc1", "linear_fc2"):
                            name = f"decoder.layers.{layers[j]}.mlp.experts.local_experts.{g}.{fc}.weight"
                            # Split as the dense MLP's fc1 (gate and up rows) and fc2 (columns).
                            shard = mf.split(f"decoder.layers.0.mlp.{fc}.weight", w[name], c, rank).clone()
                            if experts == "sequential":
                                model[f"{prefix}experts.local_experts.{g - e * local}.{fc}.weight"] = shard
                            else:
                                model[f"{prefix}experts.{fc}.weight{g - e * local}"] = shard
                    if experts == "grouped":
                        model[f"{prefix}experts.linear_fc1._extra_state"] = None
                state = {"args": args, "checkpoint_version": 3.0, "iteration": iteration, "model": model,
                         "optimizer": chained_optimizer(c, chunk, model, layers, rank, e * local, avg, sq, w, steps)}
                if unchained:  # one optimizer state dict, not Megatron-Core's chained [dense, experts] list
                    state["optimizer"] = state["optimizer"][0]
                d = os.path.join(out, f"iter_{iteration:07d}", f"mp_rank_{rank:02d}_{stage:03d}_{e:03d}")
                os.makedirs(d, exist_ok=True)
                torch.save(state, os.path.join(d, "model_optim_rng.pt"))
    with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))


if __name__ == "__main__":
    main()
