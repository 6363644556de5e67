#!/usr/bin/env python3
"""Plots a run's training and validation loss against iterations, from its metrics.jsonl.

usage: plot_losses.py LOG_DIR|METRICS_JSONL [--output PNG]

LOG_DIR is a `tessera train --log-dir` directory. The PNG (default: LOG_DIR/loss.png) shows the training
lm loss of each logged interval and the validation lm loss of each evaluation; a resumed run appends to
the same file, and the last record of an iteration wins. Prints the PNG's path.
"""
import argparse
import json
import os
import sys

TRAIN_COLOR, VALIDATION_COLOR = "#1f77b4", "#ff7f0e"  # the test finds the two curves by these colours


def read_series(path):
    train, validation, bits_per_byte = {}, {}, {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_losses: {path}:{number}: not JSON ({e.msg})")
            iteration = record.get("iteration")
            if iteration is None:
                continue
            if "lm_loss" in record:
                train[iteration] = record["lm_loss"]
            if "validation_lm_loss" in record:
                validation[iteration] = record["validation_lm_loss"]
            if "validation_bits_per_byte" in record:
                bits_per_byte[iteration] = record["validation_bits_per_byte"]
    return train, validation, bits_per_byte


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="a --log-dir directory or its metrics.jsonl")
    parser.add_argument("--output", help="the PNG to write (default: beside metrics.jsonl, loss.png)")
    args = parser.parse_args()
    path = os.path.join(args.source, "metrics.jsonl") if os.path.isdir(args.source) else args.source
    if not os.path.isfile(path):
        sys.exit(f"plot_losses: {path}: no such file (expected a --log-dir directory or its metrics.jsonl)")
    train, validation, bits_per_byte = read_series(path)
    if not train and not validation:
        sys.exit(f"plot_losses: {path}: no lm_loss or validation_lm_loss records to plot")
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(path)), "loss.png")

    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    series = []
    for name, points, color, marker in (("training", train, TRAIN_COLOR, None),
                                        ("validation", validation, VALIDATION_COLOR, "o")):
        if points:
            xs = sorted(points)
            ax.plot(xs, [points[x] for x in xs], color=color, marker=marker, markersize=4, linewidth=1.5,
                    label=f"{name} lm loss")
            series.append(name)
    title = "lm loss (nats per token)"
    if validation:
        last = max(validation)
        title += f" | validation at iteration {last}: {validation[last]:.3f}"
        if last in bits_per_byte:
            title += f" ({bits_per_byte[last]:.3f} bits per byte)"
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("iteration")
    ax.set_ylabel("lm loss")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    tmp = output + ".tmp.png"
    fig.savefig(tmp, metadata={"Description": "series: " + ", ".join(series)})
    os.replace(tmp, output)  # a reader never sees half a PNG
    print(output)


if __name__ == "__main__":
    main()
