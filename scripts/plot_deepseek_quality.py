#!/usr/bin/env python3
"""Plots scripts/deepseek_quality.sh's runs: PREFIX_balance.png (the experts' load spread over training and
the validation loss of the MoE runs) and PREFIX_mtp.png (the main head's validation loss without and with
multi-token prediction), and prints a Markdown table of every run.

usage: plot_deepseek_quality.py RUN_DIR... --output-prefix PREFIX [--title TITLE]
Each RUN_DIR is a --log-dir (metrics.jsonl); RUN_DIR.log is the run's output.
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_moe_quality  # noqa: E402

COLORS = {"aux_loss": "#1f77b4", "aux_loss_sigmoid": "#9467bd", "aux_free": "#d62728", "unbalanced": "#7f7f7f", "dense": "#000000",
          "dense_mtp1": "#2ca02c"}


def read_run(run):
    """The run's training and validation records, read as scripts/plot_moe_quality.py reads them."""
    r = plot_moe_quality.read_run(run, hidden=0, layers=0)  # (the FLOPs it also derives are not used here)
    return dict(name=r["name"], train=r["train"], val=r["val"])


def plot_balance(runs, output, title):
    moe = [r for r in runs if any("expert_load" in t for t in r["train"])]
    if not moe:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in moe:
        points = [(t["iteration"], t["expert_load"]["cv"]) for t in r["train"] if "expert_load" in t]
        left.plot(*zip(*points), label=r["name"], color=COLORS.get(r["name"]))
        right.plot(sorted(r["val"]), [r["val"][i][0] for i in sorted(r["val"])], marker="o", label=r["name"],
                   color=COLORS.get(r["name"]))
    left.set_xlabel("iteration")
    left.set_ylabel("expert load cv over the log interval (0 = even)")
    left.set_title("load spread over 8 experts, top-2")
    right.set_xlabel("iteration")
    right.set_ylabel("validation lm loss")
    right.set_title("validation loss")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = output + "_balance.png"
    fig.savefig(path, dpi=110)
    return path


def plot_mtp(runs, output, title):
    dense = [r for r in runs if r["name"].startswith("dense")]
    if not dense:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in dense:
        ax.plot(sorted(r["val"]), [r["val"][i][0] for i in sorted(r["val"])], marker="o", label=r["name"],
                color=COLORS.get(r["name"]))
    ax.set_xlabel("iteration")
    ax.set_ylabel("validation lm loss (main head)")
    ax.set_title("multi-token prediction: main head's validation loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = output + "_mtp.png"
    fig.savefig(path, dpi=110)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--output-prefix", required=True)
    p.add_argument("--title", default="")
    a = p.parse_args()
    runs = [read_run(r) for r in a.runs]
    print("| run | validation lm loss | bits per byte | expert load cv (last interval) | mean cv over training | mtp_1 loss (last) |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        last_val = r["val"][max(r["val"])]
        loads = [t["expert_load"]["cv"] for t in r["train"] if "expert_load" in t]
        mtp = r["train"][-1].get("mtp_1 loss", r["train"][-1].get("mtp_1_loss"))
        bpb = f"{last_val[1]:.4f}" if last_val[1] is not None else "-"
        print(f"| {r['name']} | {last_val[0]:.4f} | {bpb} | {f'{loads[-1]:.3f}' if loads else '-'} | "
              f"{f'{sum(loads) / len(loads):.3f}' if loads else '-'} | {f'{mtp:.4f}' if mtp is not None else '-'} |")
    for path in (plot_balance(runs, a.output_prefix, a.title), plot_mtp(runs, a.output_prefix, a.title)):
        if path:
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
