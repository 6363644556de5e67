#!/usr/bin/env python3
"""Draws pipeline schedules as bench_pipeline_schedules simulates them: one panel per schedule, one row
per pipeline rank, each forward (F), backward (B, the input gradient under zero bubble) and weight-gradient
pass (W) a box labelled with its micro-batch, coloured by kind; a second chunk (interleaved, ZB-V) darker.

usage: plot_pipeline_schedules.py TIMELINE_JSON --output PNG
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"F": ("#4c9be8", "#1f5fa8"), "B": ("#5cc46a", "#2e8a3b"), "W": ("#f0a040", "#b86e10")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("timeline")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    with open(args.timeline, encoding="utf-8") as f:
        schedules = json.load(f)
    end = max(e[4] + e[5] for s in schedules for e in s["events"])
    fig, axes = plt.subplots(len(schedules), 1, figsize=(max(10, end * 0.32), 1.1 + 0.55 * sum(s["stages"] for s in schedules)),
                             squeeze=False)
    for ax, s in zip(axes[:, 0], schedules):
        for stage, kind, micro_batch, chunk, start, duration in s["events"]:
            ax.barh(stage, duration, left=start, height=0.8, color=COLORS[kind][min(chunk, 1)], edgecolor="white")
            ax.text(start + duration / 2, stage, f"{kind}{micro_batch}", ha="center", va="center", fontsize=6,
                    color="white")
        finish = max(e[4] + e[5] for e in s["events"])
        ax.set_title(f"{s['schedule']}: iteration {finish:g} (units of one F)", fontsize=9, loc="left")
        ax.set_yticks(range(s["stages"]))
        ax.set_yticklabels([f"rank {r}" for r in range(s["stages"])], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, end)
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(args.output)


if __name__ == "__main__":
    main()
