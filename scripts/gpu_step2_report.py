#!/usr/bin/env python3
"""The two summaries of scripts/gpu_step2_check.sh (issue 50): Tessera against PyTorch, and the top kernels.

usage: gpu_step2_report.py table TEXT...     one table of every BENCH_GPU_TRAIN (bench_gpu_train) and
                                             TORCH_GPT (bench/torch_gpt.py) line found in the TEXT files:
                                             tokens/s, MFU, peak memory, and Tessera's tokens/s and peak
                                             memory over PyTorch's (eager and compiled) at the same
                                             micro-batch size
       gpu_step2_report.py kernels CSV       the top kernels of a profile, from `nsys stats --report
                                             cuda_gpu_kern_sum --format csv` or `ncu --csv --page raw
                                             --metrics gpu__time_duration.sum`, and the share of GPU time
                                             outside GEMMs and attention (issue 50's target: < 20 %)

Standard library only: it runs under whichever python3 the GPU machine has.
"""
import csv
import re
import sys

TOP = 12
# cuBLAS/cuBLASLt's kernels (nvjet_*, sm90_xmma_gemm_*, cutlass_*), and attention's (Tessera's, cuDNN's,
# PyTorch's flash and memory-efficient ones).
GEMM = re.compile(r"gemm|xmma|cutlass|nvjet|cublas", re.I)
ATTENTION = re.compile(r"attention|flash|fmha|sdpa|softmax", re.I)


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def read_runs(paths):
    runs = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("BENCH_GPU_TRAIN "):
                    v = fields(line)
                    name = f"tessera {v['dtype']} ({v['attention']} attention)"
                    runs.append(dict(v, who="tessera", name=name, dropout=float(v["dropout"])))
                elif line.startswith("TORCH_GPT "):
                    v = fields(line)
                    mode = "compiled" if v["compiled"] == "1" else "eager"
                    name = f"torch {mode} {v['dtype']} ({v['attention']} attention)"
                    runs.append(dict(v, who=f"torch {mode}", name=name, dropout=0.0))
    # Tessera's first, then PyTorch eager's and compiled's, each by micro-batch size and dropout.
    order = {"tessera": 0, "torch eager": 1, "torch compiled": 2}
    return sorted(runs, key=lambda r: (order[r["who"]], int(r["mbs"]), r["dropout"]))


def table(paths):
    runs = read_runs(paths)
    if not runs:
        sys.exit(f"gpu_step2_report: no BENCH_GPU_TRAIN or TORCH_GPT lines in {', '.join(paths)}")
    # PyTorch's runs at each micro-batch size: the denominators of the ratios.
    torch_runs = {(r["who"], r["mbs"]): r for r in runs if r["who"] != "tessera"}
    head = (f"{'run':<40} {'mbs':>4} {'dropout':>7} {'ms/step':>9} {'tokens/s':>10} {'MFU %':>7} {'peak MiB':>9}"
            f" {'x eager':>8} {'x compiled':>10} {'mem/eager':>9}")
    print(head)
    print("-" * len(head))
    for r in runs:
        eager, compiled = torch_runs.get(("torch eager", r["mbs"])), torch_runs.get(("torch compiled", r["mbs"]))

        def ratio(key, other):
            return f"{float(r[key]) / float(other[key]):.2f}" if other and float(other[key]) > 0 else "-"

        print(f"{r['name']:<40} {r['mbs']:>4} {r['dropout']:>7g} {float(r['ms']):>9.1f} {float(r['tokens_per_s']):>10.0f}"
              f" {r['mfu']:>7} {float(r['peak_mem_mib']):>9.0f} {ratio('tokens_per_s', eager):>8}"
              f" {ratio('tokens_per_s', compiled):>10} {ratio('peak_mem_mib', eager):>9}")
    print("x eager / x compiled: tokens/s over PyTorch's at the same micro-batch size (PyTorch runs without dropout); "
          "mem/eager: peak memory in use over PyTorch eager's")


def kernel_times(path):
    """(name, total ns, launches) per kernel, from nsys's cuda_gpu_kern_sum or ncu's raw page."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line for line in f if line.strip()]
    # Both tools may print notes before the CSV: it starts at the heading line.
    start = next((i for i, line in enumerate(lines) if "Name" in line and "," in line), None)
    if start is None:
        sys.exit(f"gpu_step2_report: {path}: no CSV heading with a kernel name column")
    rows = list(csv.DictReader(lines[start:]))
    totals = {}
    for row in rows:
        if "Total Time (ns)" in row:  # nsys: one row per kernel
            name, ns, n = row["Name"], float(row["Total Time (ns)"]), int(row["Instances"])
        elif "gpu__time_duration.sum" in row:  # ncu: one row per launch (and a units row)
            try:
                ns, name, n = float(row["gpu__time_duration.sum"].replace(",", "")), row["Kernel Name"], 1
            except (ValueError, TypeError, AttributeError):  # the units row, a line of the program's
                continue
        else:
            sys.exit(f"gpu_step2_report: {path}: neither nsys's 'Total Time (ns)' nor ncu's gpu__time_duration.sum")
        t, c = totals.get(name, (0.0, 0))
        totals[name] = (t + ns, c + n)
    return sorted(((n, t, c) for n, (t, c) in totals.items()), key=lambda x: -x[1])


def kernels(path):
    times = kernel_times(path)
    total = sum(t for _, t, _ in times)
    if total <= 0:
        sys.exit(f"gpu_step2_report: {path}: no kernel time")
    print(f"{'kernel':<70} {'ms':>9} {'%':>6} {'launches':>9}")
    for name, t, n in times[:TOP]:
        short = name if len(name) <= 70 else name[:67] + "..."
        print(f"{short:<70} {t / 1e6:>9.2f} {100 * t / total:>6.1f} {n:>9}")
    gemm = sum(t for n, t, _ in times if GEMM.search(n))
    attention = sum(t for n, t, _ in times if not GEMM.search(n) and ATTENTION.search(n))
    other = total - gemm - attention
    print(f"GPU time {total / 1e6:.1f} ms in {len(times)} kernels: GEMMs {100 * gemm / total:.1f} %, attention "
          f"{100 * attention / total:.1f} %, outside GEMMs and attention {100 * other / total:.1f} %")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "table":
        table(sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "kernels":
        kernels(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
