#!/usr/bin/env python3
"""Plots the MLM loss curves of several BERT runs (pre-LN against post-LN) in one PNG.

usage: plot_bert_ln.py LOG_DIR [LOG_DIR ...] --output PNG [--title TEXT]

Each LOG_DIR is a `tessera pretrain_bert --log-dir` directory named like preln_2l or postln_12l (its
name is the curve's label). The left panel shows the training lm (MLM) loss of each logged interval,
the right panel the validation lm loss of each evaluation. Pre-LN runs are solid, post-LN runs dashed;
each depth has its own colour. Prints a table of the last values and the PNG's path.
"""
import argparse
import json
import os
import re
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def read_series(path):
    series = {"lm_loss": {}, "validation_lm_loss": {}, "sop_loss": {}, "validation_sop_loss": {},
              "elapsed_ms_per_iteration": {}}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_bert_ln: {path}:{number}: not JSON ({e.msg})")
            iteration = record.get("iteration")
            if iteration is None:
                continue
            for key, points in series.items():
                # the auxiliary losses keep their log-line names ("sop loss", "validation_sop loss")
                for spelling in (key, key.replace("sop_loss", "sop loss")):
                    if spelling in record:
                        points[iteration] = record[spelling]
    return series


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="--log-dir directories")
    parser.add_argument("--output", required=True, help="the PNG to write")
    parser.add_argument("--title", default="BERT MLM loss: pre-LN against post-LN")
    args = parser.parse_args()

    runs = []
    for run in args.runs:
        path = os.path.join(run, "metrics.jsonl")
        if not os.path.isfile(path):
            sys.exit(f"plot_bert_ln: {path}: no such file")
        name = os.path.basename(os.path.normpath(run))
        match = re.match(r"(pre|post)ln_(\d+)l$", name)
        ln, layers = (match.group(1), int(match.group(2))) if match else ("pre", 0)
        runs.append((name, ln, layers, read_series(path)))

    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    depths = sorted({layers for _, _, layers, _ in runs})
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), dpi=100, sharey=True)
    for name, ln, layers, series in runs:
        color = COLORS[depths.index(layers) % len(COLORS)]
        style = "-" if ln == "pre" else "--"
        label = f"{ln}-LN, {layers} layers"
        for ax, key, marker in ((axes[0], "lm_loss", None), (axes[1], "validation_lm_loss", "o")):
            points = series[key]
            if points:
                xs = sorted(points)
                ax.plot(xs, [points[x] for x in xs], style, color=color, marker=marker, markersize=4,
                        linewidth=1.5, label=label)
    for ax, what in zip(axes, ("training", "validation")):
        ax.set_title(f"{what} MLM loss", fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(True, alpha=0.3)
        ax.legend()
    axes[0].set_ylabel("lm loss (nats per masked token)")
    fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    tmp = args.output + ".tmp.png"
    fig.savefig(tmp)
    os.replace(tmp, args.output)  # a reader never sees half a PNG

    # the last logged values (training: the mean over the last log interval) and the median of the
    # logged milliseconds per iteration (training steps only, evaluation excluded)
    print("| run | training MLM loss | training sop loss | validation MLM loss | validation sop loss | ms/iteration |")
    print("|---|---|---|---|---|---|")
    for name, _, _, series in runs:
        last = lambda key: (f"{series[key][max(series[key])]:.3f}" if series[key] else "-")
        ms = sorted(series["elapsed_ms_per_iteration"].values())
        median = f"{ms[len(ms) // 2]:.0f}" if ms else "-"
        print(f"| {name} | {last('lm_loss')} | {last('sop_loss')} | {last('validation_lm_loss')} | "
              f"{last('validation_sop_loss')} | {median} |")
    print(args.output)


if __name__ == "__main__":
    main()
