#!/usr/bin/env python3
"""Plots bench_gpu_train's results as bars of tokens per second, each labelled with its MFU.

usage: plot_gpu_train.py TEXT [TEXT ...] --output PNG [--title TITLE]

Each TEXT is anything holding bench_gpu_train's table lines (its own output, or scripts/gpu_check.sh's log,
whose summary repeats them): a heading line starting "model" and, on the next line, one result
(model, type, attention, ms/step, tokens/s, TFLOP/s, loss, MFU, and since issue 50 peak MiB). Every result found becomes one bar, in the
order found, named "<model> <type>, <attention> attention". Prints the PNG's path.
"""
import argparse
import os
import sys

BAR_COLOR = "#2ca02c"  # the test finds the bars by this colour


def read_results(paths):
    results = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            sys.exit(f"plot_gpu_train: {path}: {e.strerror}")
        for heading, row in zip(lines, lines[1:]):
            if not (heading.split()[:3] == ["model", "type", "attention"]):
                continue
            fields = row.split()
            if len(fields) not in (8, 9) or not fields[7].endswith("%"):
                sys.exit(f"plot_gpu_train: {path}: the line after a heading is not a result: '{row}'")
            try:
                name = f"{fields[0]} {fields[1]}, {fields[2]} attention"
                results.append((name, float(fields[4]), float(fields[7].rstrip("%"))))
            except ValueError:
                sys.exit(f"plot_gpu_train: {path}: tokens/s or MFU is not a number in '{row}'")
    if not results:
        sys.exit(f"plot_gpu_train: {', '.join(paths)}: no bench_gpu_train result lines (a 'model type attention' "
                 "heading followed by a result)")
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("texts", nargs="+")
    parser.add_argument("--output", required=True)
    parser.add_argument("--title", default="GPT training step on one GPU (bench_gpu_train)")
    args = parser.parse_args()
    results = read_results(args.texts)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r[0] for r in results]
    tokens = [r[1] for r in results]
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.6 * len(results)), dpi=100)
    bars = ax.barh(range(len(results)), tokens, color=BAR_COLOR)
    ax.set_yticks(range(len(results)), names)
    ax.invert_yaxis()  # first result on top, as in the table
    ax.set_xlabel("tokens per second (higher is better)")
    ax.set_title(args.title)
    ax.set_xlim(0, max(tokens) * 1.4)
    for bar, (_, t, mfu) in zip(bars, results):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {t:,.0f} ({mfu:.2f} % MFU)", va="center")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    fig.savefig(args.output, metadata={"Description": "results: " + ", ".join(names)})
    print(args.output)


if __name__ == "__main__":
    main()
