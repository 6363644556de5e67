#!/usr/bin/env python3
"""Plots validation loss against training FLOPs for dense and mixture-of-experts GPT runs on Brown, and
each run's time per step, in one PNG; prints a Markdown table of the runs.

usage: plot_moe_quality.py LOG_DIR [LOG_DIR ...] --hidden H --layers L --output PNG [--title TEXT]

Each LOG_DIR is a `tessera train --log-dir` directory (its name is the curve's label), with LOG_DIR.log
beside it holding the run's stdout (for the parameter count and the MoE flags).

Training FLOPs are Megatron's formula as tessera's log reports it (num_floating_point_operations in
Megatron-LM's training.py, with its MoE term: the expert MLPs counted top-k times per token, routers
not counted): the FLOPs of one iteration are the logged throughput per GPU (TFLOP/s) times the logged
time per iteration (times one device), which is the same for every interval of a run; the FLOPs at an
evaluation are that times the iteration. Active parameters per token: the total less (experts - top-k)
experts' MLPs (2 h f + f + h each, with f = 4h) in every MoE layer.
"""
import argparse
import json
import os
import re
import statistics
import sys

COLORS = ["#000000", "#7f7f7f", "#1f77b4", "#2ca02c", "#9467bd", "#d62728", "#8c564b", "#17becf", "#ff7f0e", "#e377c2"]


def read_run(run, hidden, layers):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        sys.exit(f"plot_moe_quality: {path}: no such file")
    train, val = [], {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_moe_quality: {path}:{number}: not JSON ({e.msg})")
            if "validation_lm_loss" in r:
                val[r["iteration"]] = (r["validation_lm_loss"], r.get("validation_bits_per_byte"))
            elif "lm_loss" in r:
                train.append(r)
    log = open(os.path.normpath(run) + ".log", encoding="utf-8").read()
    m = re.search(r"number of parameters on .*?: (\d+)", log)
    total = int(m.group(1)) if m else None
    # The MoE flags: the "flags:" line moe_quality.sh writes at the top of the log, else the run's name
    # (moe8_top2, prmoe_4_8_top1).
    m = re.search(r"^flags:(.*)$", log, re.M)
    flags = m.group(1) if m else ""
    experts, topk = [], 1
    m = re.search(r"--num-experts ((?:\d+ ?)+)", flags)
    n = re.match(r"(?:pr)?moe((?:_?\d+)+)_top(\d+)", os.path.basename(os.path.normpath(run)))
    if m:
        experts = [int(x) for x in m.group(1).split()]
    elif n:
        experts = [int(x) for x in n.group(1).strip("_").split("_")]
    m = re.search(r"--moe-router-topk (\d+)", flags)
    if m:
        topk = int(m.group(1))
    elif n:
        topk = int(n.group(2))
    # Per MoE layer (every layer here): the pyramid's per-layer list or one value for each of them.
    per_layer = experts if len(experts) > 1 else experts * layers
    f = 4 * hidden
    expert_params = 2 * hidden * f + f + hidden
    active = total - sum(max(e - topk, 0) for e in per_layer) * expert_params if total else None
    flops_per_iter = statistics.median(r["tflops_per_device"] * 1e12 * r["elapsed_ms_per_iteration"] / 1e3 for r in train)
    ms = statistics.median(r["elapsed_ms_per_iteration"] for r in train)
    last = train[-1]
    load = last.get("expert_load")
    return dict(name=os.path.basename(os.path.normpath(run)), train=train, val=val, total=total, active=active,
                flops_per_iter=flops_per_iter, ms=ms, cv=load["cv"] if load else None,
                dropped=load["dropped"] if load else None, iters=last["iteration"], experts=experts, topk=topk)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="--log-dir directories")
    parser.add_argument("--hidden", type=int, required=True, help="the model's hidden size")
    parser.add_argument("--layers", type=int, required=True, help="the model's layers (each an MoE layer)")
    parser.add_argument("--output", required=True, help="the PNG to write")
    parser.add_argument("--title", default="Dense and MoE GPT on Brown")
    args = parser.parse_args()
    runs = [read_run(r, args.hidden, args.layers) for r in args.runs]

    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5), dpi=100, gridspec_kw={"width_ratios": [2, 1]})
    for i, r in enumerate(runs):
        xs = sorted(r["val"])
        color = COLORS[i % len(COLORS)]
        style = "--" if r["name"].endswith("noaux") else "-"
        axes[0].plot([x * r["flops_per_iter"] for x in xs], [r["val"][x][0] for x in xs], style, marker="o",
                     markersize=4, color=color, linewidth=1.5, label=r["name"])
    axes[0].set_xscale("log")
    axes[0].set_xlabel("training FLOPs (Megatron's formula)")
    axes[0].set_ylabel("validation lm loss (nats per token)")
    axes[0].set_title("validation loss against training FLOPs (a point per evaluation)", fontsize=10)
    axes[0].grid(True, which="both", alpha=0.3)
    axes[0].legend()
    names = [r["name"] for r in runs]
    axes[1].barh(names, [r["ms"] for r in runs], color=[COLORS[i % len(COLORS)] for i in range(len(runs))])
    axes[1].invert_yaxis()
    axes[1].set_xlabel("ms per step (median of logged intervals)")
    axes[1].set_title("time per step, 1 thread", fontsize=10)
    axes[1].grid(True, axis="x", alpha=0.3)
    fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    tmp = args.output + ".tmp.png"
    fig.savefig(tmp)
    os.replace(tmp, args.output)  # a reader never sees half a PNG

    print("| run | parameters (total) | active per token | training FLOPs | validation loss | bits per byte | ms/step | expert load cv | dropped |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        end = max(r["val"])
        loss, bpb = r["val"][end]
        cv = f"{r['cv']:.3f}" if r["cv"] is not None else "-"
        dropped = f"{r['dropped']:.3f}" if r["dropped"] is not None else "-"
        print(f"| {r['name']} | {r['total'] / 1e6:.2f} M | {r['active'] / 1e6:.2f} M | "
              f"{r['flops_per_iter'] * r['iters']:.3g} | {loss:.4f} | {bpb:.4f} | {r['ms']:.0f} | {cv} | {dropped} |")
    print(args.output)


if __name__ == "__main__":
    main()
