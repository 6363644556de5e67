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

usage: megatron_moe_fixture.py TESSERA_DIR OUT_DIR=sequential|grouped[,NAME=PYTHON_VALUE...] ...
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
import torch  # noqa: E402

EP = 2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tessera")
    p.add_argument("specs", nargs="+", metavar="OUT_DIR=sequential|grouped[,NAME=PYTHON_VALUE...]",
                   help="one checkpoint per spec (one process, one torch import: the test's time); NAME=VALUE sets "
                        "an attribute of the saved args")
    a = p.parse_args()
    mf.TP, mf.PP = 2, 2
    iteration, index, w, _, _ = rf.read_tessera(a.tessera)
    for spec in a.specs:
        out, _, rest = spec.partition("=")
        experts, *sets = rest.split(",")
        if experts not in ("sequential", "grouped"):
            p.error(f"bad spec {spec}")
        write(out, experts, sets, iteration, index, w)
        print(f"{out}: {spec}")


def write(out, experts, sets, iteration, index, w):
    c = mf.config("llama")
    num_experts = 1 + max(int(m.group(1)) for m in (re.search(r"local_experts\.(\d+)\.", k) for k in w) if m)
    local = num_experts // EP
    args = rf.megatron_args(c, iteration, index, False, "torch")
    args.num_experts, args.moe_router_topk, args.moe_ffn_hidden_size = num_experts, 2, 16
    args.expert_model_parallel_size, args.moe_grouped_gemm = EP, experts == "grouped"
    args.moe_router_load_balancing_type, args.moe_aux_loss_coeff = "aux_loss", 0.0
    for item in sets:
        name, value = item.split("=", 1)
        setattr(args, name, ast.literal_eval(value))
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
                state = {"args": args, "checkpoint_version": 3.0, "iteration": iteration, "model": model}
                d = os.path.join(out, f"iter_{iteration:07d}", f"mp_rank_{rank:02d}_{stage:03d}_{e:03d}")
                os.makedirs(d, exist_ok=True)
                torch.save(state, os.path.join(d, "model_optim_rng.pt"))
    with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(iteration))


if __name__ == "__main__":
    main()
