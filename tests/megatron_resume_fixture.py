#!/usr/bin/python3
"""Megatron-LM checkpoints with Adam's state for tests/megatron_resume_cli.sh, made by PyTorch from the
weights and moments of a Tessera checkpoint, so that resuming either must give the same next losses.

Reads TESSERA_DIR's latest checkpoint (a one-process save: each tensor whole in its safetensors files,
the moments as optimizer.exp_avg.NAME / optimizer.exp_avg_sq.NAME), splits it over tensor 2 x pipeline 2
as Megatron's ranks hold it (tests/megatron_fixture.py's split and state dicts) and writes, as Megatron
writes them:
  torch        iter_N/mp_rank_TT_PPP/model_optim_rng.pt with "optimizer": torch's Adam state dict,
               parameters numbered as Megatron-Core's _get_param_groups groups them (the groups with and
               without weight decay in the order first met, each in named_parameters order), per-parameter exp_avg, exp_avg_sq and
               step; fp32: the state dict itself (Megatron's FP32Optimizer), bf16: under "optimizer" beside
               fp32_from_fp16_params, the fp32 master weights (Float16OptimizerWithFloat16Params).
  torch_dist   PyTorch's DCP writer with the model keys and optimizer.state.exp_avg.<key>,
               optimizer.state.exp_avg_sq.<key> (bf16: optimizer.state.fp32_param.<key>), chunked as the model
               keys; common.pt with the args and the optimizer's common_step.

usage: megatron_resume_fixture.py TESSERA_DIR OUT_DIR=torch|torch_dist[,bf16][,no-optim][,misnumbered]
                                 [,distrib-optim][,dp-reshardable][,vp2] ...
"""
import argparse
import collections
import glob
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import megatron_fixture as mf  # noqa: E402 (it makes torch 1.13's DCP importable first)
import torch  # noqa: E402
from hf_reference import read_safetensors  # noqa: E402


def read_tessera(path):
    with open(os.path.join(path, "latest_checkpointed_iteration.txt")) as f:
        iteration = int(f.read().strip())
    d = os.path.join(path, f"iter_{iteration:07d}")
    with open(os.path.join(d, "index.json")) as f:
        index = json.load(f)
    tensors = {}
    for name in glob.glob(os.path.join(d, "*.safetensors")):
        tensors.update(read_safetensors(name))
    weights = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    avg = {k[len("optimizer.exp_avg."):]: v for k, v in tensors.items() if k.startswith("optimizer.exp_avg.")}
    sq = {k[len("optimizer.exp_avg_sq."):]: v for k, v in tensors.items() if k.startswith("optimizer.exp_avg_sq.")}
    return iteration, index, weights, avg, sq


def megatron_args(c, iteration, index, bf16, fmt):
    saved = dict(c)
    saved.update(tensor_model_parallel_size=mf.TP, pipeline_model_parallel_size=mf.PP,
                 virtual_pipeline_model_parallel_size=None, rotary_base=10000, rotary_percent=1.0,
                 rotary_interleaved=False, norm_epsilon=1e-5, apply_layernorm_1p=False, qk_layernorm=False,
                 num_experts=None, bias_gelu_fusion=False, openai_gelu=False, squared_relu=False, hidden_dropout=0.0,
                 attention_dropout=0.0, init_method_std=0.02, tokenizer_type="NullTokenizer", vocab_file=None,
                 merge_file=None, tokenizer_model=None, consumed_train_samples=index["consumed_train_samples"],
                 seed=index["seed"], micro_batch_size=2, global_batch_size=4, train_iters=100, lr=1e-3, fp16=False,
                 bf16=bf16, params_dtype=torch.bfloat16 if bf16 else torch.float32, iteration=iteration,
                 use_checkpoint_args=False, ckpt_format=fmt, use_distributed_optimizer=False)
    return argparse.Namespace(**saved)


def global_name(local_key, layers):
    """A chunk's local key (decoder.layers.J....) under the global layer number."""
    if local_key.startswith("decoder.layers."):
        j, rest = local_key.split(".", 3)[2:]
        return f"decoder.layers.{layers[int(j)]}.{rest}"
    return local_key


def legacy_optimizer(chunk, layers, rank, c, avg, sq, masters, steps, bf16, swap):
    return chunks_optimizer([(chunk, layers)], rank, c, avg, sq, masters, steps, bf16, swap)


def chunks_optimizer(chunks, rank, c, avg, sq, masters, steps, bf16, swap):
    """The optimizer state dict over a file's model chunks [(chunk, its global layers)]: Megatron-Core's
    _get_param_groups walks each chunk's named_parameters in turn (model0's, then model1's, ...)."""
    params = [(global_name(k, layers), t) for chunk, layers in chunks for k, t in chunk.items()
              if isinstance(t, torch.Tensor)]  # named_parameters order, under the global names
    decayed = [i for i, (k, t) in enumerate(params) if not (k.endswith(".bias") or t.dim() == 1)]
    rest = [i for i in range(len(params)) if i not in decayed]
    # Megatron-Core's _get_param_groups: the groups in the order it first meets them (a later stage, which
    # starts with a norm, has the group without decay first), each labelled by wd_mult.
    groups = [(decayed, 1.0), (rest, 0.0)] if 0 in decayed else [(rest, 0.0), (decayed, 1.0)]
    if swap:  # the first group's members rotated by one: each number's moments then meet another parameter
        groups[0] = (groups[0][0][1:] + groups[0][0][:1], groups[0][1])
    state, param_groups, fp32_groups, n = {}, [], [], 0
    for members, wd_mult in groups:
        ids = []
        for i in members:
            name = params[i][0]
            state[n] = {"exp_avg": mf.split(name, avg[name], c, rank).clone(),
                        "exp_avg_sq": mf.split(name, sq[name], c, rank).clone(),
                        "step": torch.tensor(float(steps))}
            ids.append(n)
            n += 1
        param_groups.append({"params": ids, "lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                             "weight_decay": 0.01 * wd_mult, "wd_mult": wd_mult, "lr_mult": 1.0})
        fp32_groups.append([mf.split(params[i][0], masters[params[i][0]], c, rank).clone() for i in members])
    inner = {"state": state, "param_groups": param_groups}
    if not bf16:
        return inner  # FP32Optimizer.state_dict(): torch's own
    return {"optimizer": inner, "grad_scaler": None, "fp32_from_fp16_params": fp32_groups}


def write_legacy(out, sub, c, w, avg, sq, args, steps, bf16, no_optim, swap, distrib, vp=1):
    dtype = torch.bfloat16 if bf16 else torch.float32
    per_chunk = c["num_layers"] // (mf.PP * vp)
    for stage in range(mf.PP):
        for rank in range(mf.TP):
            # With an interleaved pipeline (vp chunks per stage) chunk v of stage p holds the layers of
            # virtual stage v * PP + p, under "model{v}".
            chunks = []
            for v in range(vp):
                layers = list(range((v * mf.PP + stage) * per_chunk, (v * mf.PP + stage + 1) * per_chunk))
                chunks.append((mf.chunk_state(c, w, "mcore", rank, layers, first=v == 0 and stage == 0,
                                              last=v == vp - 1 and stage == mf.PP - 1, dtype=dtype), layers))
            state = {"args": args, "checkpoint_version": 3.0, "iteration": args.iteration,
                     "opt_param_scheduler": {"num_steps": steps * 4, "max_lr": 1e-3},
                     "rng_state": [{"random_rng_state": None, "torch_rng_state": torch.get_rng_state()}]}
            for v, (chunk, _) in enumerate(chunks):
                state["model" if vp == 1 else f"model{v}"] = chunk
            if not no_optim:
                state["optimizer"] = chunks_optimizer(chunks, rank, c, avg, sq, w, steps, bf16, swap)
            d = os.path.join(out, sub, f"mp_rank_{rank:02d}_{stage:03d}")
            os.makedirs(d, exist_ok=True)
            if distrib:
                # DistributedOptimizer.state_dict(): the param groups without their parameter numbers and no
                # "state"; the moments go to distrib_optim.pt as flat per-bucket buffers.
                inner = state["optimizer"]["optimizer"] if bf16 else state["optimizer"]
                for group in inner["param_groups"]:
                    del group["params"]
                del inner["state"]
                state["optimizer"] = {"optimizer": inner, "grad_scaler": None}
                torch.save({0: {(torch.float32, torch.float32): [{"param": torch.zeros(64), "exp_avg": torch.zeros(64),
                                                                   "exp_avg_sq": torch.zeros(64)}]}},
                           os.path.join(d, "distrib_optim.pt"))
            torch.save(state, os.path.join(d, "model_optim_rng.pt"))


def write_dist(out, sub, c, w, avg, sq, args, steps, bf16, no_optim, dp_reshardable):
    dtype = torch.bfloat16 if bf16 else torch.float32

    def items(tensors, prefix, dt):
        ranks = mf.torch_dist_items(c, tensors, "mcore", dt, False)
        return [[(prefix + k, s, o, t) for k, s, o, t in r if s is not None and not k.startswith("optimizer.")]
                for r in ranks]

    ranks = mf.torch_dist_items(c, w, "mcore", dtype, False)
    ranks = [[e for e in r if not e[0].startswith("optimizer.")] for r in ranks]
    if dp_reshardable:  # the distributed optimizer's default: each data-parallel group's buckets, as objects
        for r in range(len(ranks)):
            ranks[r].append((f"optimizer.distributed.dp_group_idx_0/shard_{r}_{len(ranks)}", None, None,
                             {"param_state": torch.zeros(8)}))
    elif not no_optim:
        sets = [(avg, "optimizer.state.exp_avg."), (sq, "optimizer.state.exp_avg_sq.")]
        if bf16:
            sets.append((w, "optimizer.state.fp32_param."))
        for tensors, prefix in sets:
            for r, extra in enumerate(items(tensors, prefix, torch.float32)):
                ranks[r] += extra
    d = os.path.join(out, sub)
    mf.write_dcp(d, ranks)
    common = {"args": args, "checkpoint_version": 3.0, "iteration": args.iteration,
              "optimizer": {"optimizer": {"param_groups": [{"lr": 1e-3, "wd_mult": 1.0}, {"lr": 1e-3, "wd_mult": 0.0}],
                                          "state": {"common_step": steps}}},
              "opt_param_scheduler": {"num_steps": steps * 4, "max_lr": 1e-3}}
    torch.save(common, os.path.join(d, "common.pt"))
    with open(os.path.join(d, "metadata.json"), "w") as f:
        f.write('{"sharded_backend": "torch_dist", "sharded_backend_version": 1, '
                '"common_backend": "torch", "common_backend_version": 1}')


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tessera")
    p.add_argument("specs", nargs="+", metavar="OUT_DIR=FORMAT[,OPTION...]",
                   help="one checkpoint per spec (one process, one torch import: the test's time); FORMAT torch or "
                        "torch_dist; OPTION bf16, no-optim, misnumbered (the first group's numbers rotated "
                        "by one: a wrong order), distrib-optim (legacy distributed optimizer: distrib_optim.pt, no per-parameter "
                        "state), dp-reshardable (torch_dist: the distributed optimizer's default buckets), vp2 (legacy: "
                        "an interleaved pipeline, two model chunks per stage, model0 and model1)")
    a = p.parse_args()
    mf.TP, mf.PP = 2, 2
    iteration, index, w, avg, sq = read_tessera(a.tessera)
    c = mf.config("llama")
    steps = index.get("optimizer_steps", iteration)
    for spec in a.specs:
        out, _, rest = spec.partition("=")
        fmt, *options = rest.split(",")
        known = {"bf16", "no-optim", "misnumbered", "distrib-optim", "dp-reshardable", "vp2"}
        if fmt not in ("torch", "torch_dist") or not set(options) <= known:
            p.error(f"bad spec {spec}")
        bf16 = "bf16" in options
        args = megatron_args(c, iteration, index, bf16, fmt)
        sub = f"iter_{iteration:07d}"
        if fmt == "torch":
            args.use_distributed_optimizer = "distrib-optim" in options
            vp = 2 if "vp2" in options else 1
            args.virtual_pipeline_model_parallel_size = vp if vp > 1 else None
            write_legacy(out, sub, c, w, avg, sq, args, steps, bf16, "no-optim" in options, "misnumbered" in options,
                         "distrib-optim" in options, vp)
        else:
            write_dist(out, sub, c, w, avg, sq, args, steps, bf16, "no-optim" in options, "dp-reshardable" in options)
        with open(os.path.join(out, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(iteration))
        print(f"{out}: {spec}, iteration {iteration}, optimizer steps {steps}")


if __name__ == "__main__":
    main()
