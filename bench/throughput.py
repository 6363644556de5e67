#!/usr/bin/python3
"""Training throughput of Tessera against PyTorch on the same GPT, threads and machine, in one run.

For each thread count and each model shape the two programs run alternately, ROUNDS times each
(Tessera, PyTorch, Tessera, PyTorch, ...), so a slow minute of this shared VM falls on both alike.
Each run reports the median ms/iteration of its iterations after the warm-up; the table gives the
median over rounds, tokens/s, the Tessera/PyTorch ratio, model FLOPs utilisation against the FMA
peak and the GEMM peak that bench_gemm_peak measures at the same thread count (before and after,
best kept), the peak resident memory of each process (ru_maxrss from wait4), and Tessera's own
per-kernel time breakdown (TESSERA_PROFILE=1, warm-up iteration left out).

Usage (from anywhere; defaults are the full benchmark of issue 7, about 25 minutes on 2 cores):
  bench/throughput.py [--threads 1,2] [--shapes gpt2,small] [--rounds 3] [--iters 5] [--warmup 1]
                      [--skip-build] [--out-dir out/bench] [--quick]
--quick is a smoke run: tiny shapes, 1 round, 3 iterations.
Environment: OPENBLAS_CORETYPE overrides the OpenBLAS kernel set chosen for PyTorch (see below).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 50256  # GPT-2's; +1 EOD = 50257, padded to 50304 by both programs
PADDED_VOCAB = 50304

# name: (layers, hidden, heads, seq, batch)
SHAPES = {
    "gpt2": (12, 768, 12, 1024, 1),   # GPT-2 124M
    "small": (6, 384, 6, 256, 8),
    "gpt2-quick": (2, 768, 12, 256, 1),
    "small-quick": (2, 384, 6, 128, 4),
}


def model_flops(layers, hidden, seq, batch):
    """Megatron's model FLOPs per iteration (GPT, MHA, no recompute)."""
    l, h, s, b, v = layers, hidden, seq, batch, PADDED_VOCAB
    return 12 * b * s * l * h * h * (1 + 1 + s / h + 4 + v / (2 * l * h))


def openblas_coretype():
    """Debian's OpenBLAS is built with DYNAMIC_ARCH and, on a CPU it does not recognise (some VMs), falls
    back to its slow Prescott (SSE3) kernels: name the set. SkylakeX needs AVX-512 (SIGILL without it);
    Haswell is the AVX2+FMA set, whose sgemm kernel OpenBLAS's Zen target reuses too."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags:
        return "Haswell"
    return "Sandybridge" if "avx" in flags else "Nehalem"


def cpu_ticks():
    """(busy, total) CPU ticks of the whole machine since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return user + nice + system + irq + softirq + steal, sum(v)


def busy_now():
    a = cpu_ticks()
    time.sleep(1)
    b = cpu_ticks()
    return 100.0 * (b[0] - a[0]) / max(1, b[1] - a[1])


def wait_idle(limit):
    """Waits (up to `limit` seconds) for other work on the CPUs to end."""
    waited = 0
    while waited < limit:
        b = busy_now()
        if b <= 10:
            return
        if waited == 0:
            print(f"  (CPUs {b:.0f}% busy with other work: waiting up to {limit}s)", flush=True)
        time.sleep(4)
        waited += 5


def run(cmd, env, log_path):
    """Runs cmd with stdout+stderr to log_path. Returns (text, peak RSS in MiB, % of the machine's CPU
    time that other processes used meanwhile)."""
    hz = os.sysconf("SC_CLK_TCK")
    t0 = cpu_ticks()
    with open(log_path, "w") as log:
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    t1 = cpu_ticks()
    text = open(log_path).read()
    if p.returncode != 0:
        sys.stderr.write(text[-3000:])
        sys.exit(f"{cmd[0]} failed (exit {p.returncode}); log: {log_path}")
    ours = (ru.ru_utime + ru.ru_stime) * hz
    others = max(0.0, (t1[0] - t0[0]) - ours) / max(1, t1[1] - t0[1]) * 100
    return text, ru.ru_maxrss / 1024.0, others


def median_after_warmup(text, pattern, warmup):
    times = [float(x) for x in re.findall(pattern, text)]
    if len(times) <= warmup:
        sys.exit(f"found {len(times)} iteration times, need more than the {warmup} warm-up ones")
    return statistics.median(times[warmup:])


def parse_profile(text):
    """Rows of the TESSERA_PROFILE table: name -> (calls, total seconds)."""
    rows = {}
    for m in re.finditer(r"^  (\S+)( \*)? +(\d+) +([0-9.]+) +([0-9.]+) +([0-9.]+)%$", text, re.M):
        rows[m.group(1)] = (int(m.group(3)), float(m.group(4)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default=None, help="comma-separated OMP_NUM_THREADS values (default: 1,nproc)")
    ap.add_argument("--shapes", default="gpt2,small", help=f"comma-separated, of {','.join(SHAPES)}")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each program per (threads, shape)")
    ap.add_argument("--iters", type=int, default=5, help="iterations per run, warm-up included")
    ap.add_argument("--warmup", type=int, default=1, help="leading iterations left out of each run's median")
    ap.add_argument("--skip-build", action="store_true", help="use the binaries already in build/release")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "out", "bench"))
    ap.add_argument("--wait-idle", type=int, default=120, help="seconds to wait for idle CPUs before each phase")
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny shapes, 1 round, 3 iterations")
    args = ap.parse_args()
    if args.quick:
        args.shapes, args.rounds, args.iters = "gpt2-quick,small-quick", 1, 3
    nproc = os.cpu_count()
    threads = [int(t) for t in (args.threads or ("1" if nproc == 1 else f"1,{nproc}")).split(",")]
    shapes = args.shapes.split(",")
    for s in shapes:
        if s not in SHAPES:
            sys.exit(f"--shapes: unknown shape '{s}'; known: {', '.join(SHAPES)}")
    if args.iters <= args.warmup:
        sys.exit(f"--iters ({args.iters}) must exceed --warmup ({args.warmup}): nothing would be timed")
    os.makedirs(args.out_dir, exist_ok=True)

    build = os.path.join(ROOT, "build", "release")
    if not args.skip_build:
        if not os.path.exists(os.path.join(build, "build.ninja")):
            subprocess.run(["cmake", "--preset", "release"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["ninja", "-C", build, "tessera", "bench_gemm_peak"], check=True, stdout=subprocess.DEVNULL)
    # Run copies: a rebuild by someone else mid-run must not swap the binary under the benchmark.
    bin_dir = os.path.join(args.out_dir, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    for b in ("tessera", "bench_gemm_peak"):
        shutil.copy2(os.path.join(build, b), bin_dir)

    core = openblas_coretype()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src", "apps"], cwd=ROOT).returncode != 0
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    header = (f"machine: {cpu}, {nproc} CPUs; tessera {commit}{' + uncommitted changes' if dirty else ''}; "
              f"PyTorch with OPENBLAS_CORETYPE={core}\n"
              f"rounds={args.rounds}, iterations per run={args.iters} (first {args.warmup} warm-up); "
              f"load average at start: {os.getloadavg()[0]:.2f}")
    print(header, flush=True)

    results = []  # dicts, one per (threads, shape)
    others = []   # (phase, % of CPU used by other processes)
    for nt in threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(nt))
        peaks = {"FMA": [], "GEMM": []}

        def measure_peaks(tag):
            wait_idle(args.wait_idle)
            text, _, o = run([os.path.join(bin_dir, "bench_gemm_peak"), "--seconds", "0.5"], env,
                             os.path.join(args.out_dir, f"gemm_peak_t{nt}_{tag}.log"))
            others.append((f"peak t{nt} {tag}", o))
            for k in peaks:
                peaks[k].append(float(re.search(rf"{k}_PEAK_GFLOPS=([0-9.]+)", text).group(1)))
            print(f"[threads {nt}] peaks ({tag}): FMA {peaks['FMA'][-1]:.1f}, GEMM {peaks['GEMM'][-1]:.1f} GFLOP/s",
                  flush=True)

        measure_peaks("before")
        for shape in shapes:
            l, h, heads, s, b = SHAPES[shape]
            tess_cmd = [os.path.join(bin_dir, "tessera"), "train",
                        "--num-layers", str(l), "--hidden-size", str(h), "--num-attention-heads", str(heads),
                        "--seq-length", str(s), "--max-position-embeddings", str(s),
                        "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(VOCAB),
                        "--micro-batch-size", str(b), "--global-batch-size", str(b), "--train-iters", str(args.iters),
                        "--lr", "1e-4", "--clip-grad", "1.0", "--log-interval", "1", "--eval-iters", "0",
                        "--hidden-dropout", "0", "--attention-dropout", "0"]
            torch_cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_gpt.py"), "--threads", str(nt),
                         "--num-layers", str(l), "--hidden-size", str(h), "--num-attention-heads", str(heads),
                         "--seq-length", str(s), "--micro-batch-size", str(b), "--vocab-size", str(VOCAB),
                         "--iters", str(args.iters), "--warmup", str(args.warmup)]
            tess_env = dict(env, TESSERA_PROFILE="1")
            torch_env = dict(env, OPENBLAS_CORETYPE=core)
            r = {"threads": nt, "shape": shape, "tess_ms": [], "torch_ms": [], "tess_rss": [], "torch_rss": []}
            for rnd in range(args.rounds):
                tag = f"t{nt}_{shape}_r{rnd}"
                wait_idle(args.wait_idle)
                text, rss, o = run(tess_cmd, tess_env, os.path.join(args.out_dir, f"tessera_{tag}.log"))
                others.append((f"tessera {tag}", o))
                r["tess_ms"].append(median_after_warmup(text, r"elapsed time per iteration \(ms\): ([0-9.]+)", args.warmup))
                r["tess_rss"].append(rss)
                r["profile"] = parse_profile(text)
                wait_idle(args.wait_idle)
                text, rss, o = run(torch_cmd, torch_env, os.path.join(args.out_dir, f"torch_{tag}.log"))
                others.append((f"torch {tag}", o))
                r["torch_ms"].append(float(re.search(r"TORCH_MS_PER_ITER=([0-9.]+)", text).group(1)))
                r["torch_rss"].append(rss)
                blas = re.search(r"blas=(\S+) corename=(\S+)", text)
                r["blas"] = f"{blas.group(1)} ({blas.group(2)})" if blas else "?"
                print(f"[threads {nt}] {shape} round {rnd + 1}/{args.rounds}: tessera {r['tess_ms'][-1]:.1f} ms "
                      f"({r['tess_rss'][-1]:.0f} MiB), torch {r['torch_ms'][-1]:.1f} ms ({r['torch_rss'][-1]:.0f} MiB)",
                      flush=True)
            results.append(r)
        measure_peaks("after")
        for r in results:
            if r["threads"] == nt:
                r["fma_peak"], r["gemm_peak"] = max(peaks["FMA"]), max(peaks["GEMM"])

    # ---- Summary ----
    out = [header, ""]
    out.append("| threads | shape | Tessera ms/iter | PyTorch ms/iter | Tessera tokens/s | PyTorch tokens/s | ratio | "
               "Tessera MFU (FMA / GEMM peak) | PyTorch MFU (FMA / GEMM peak) | peak RSS Tessera / PyTorch (MiB) |")
    out.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        l, h, heads, s, b = SHAPES[r["shape"]]
        flops = model_flops(l, h, s, b)
        tm, pm = statistics.median(r["tess_ms"]), statistics.median(r["torch_ms"])

        def mfu(ms):
            gf = flops / (ms / 1e3) / 1e9
            return f"{100 * gf / r['fma_peak']:.1f}% / {100 * gf / r['gemm_peak']:.1f}%"

        out.append(f"| {r['threads']} | {r['shape']} ({l}x{h}, {heads} heads, seq {s}, batch {b}) | {tm:.1f} | {pm:.1f} | "
                   f"{b * s / tm * 1e3:.1f} | {b * s / pm * 1e3:.1f} | **{pm / tm:.2f}x** | {mfu(tm)} | {mfu(pm)} | "
                   f"{max(r['tess_rss']):.0f} / {max(r['torch_rss']):.0f} |")
    out.append("")
    for r in results:
        l, h, heads, s, b = SHAPES[r["shape"]]
        out.append(f"threads {r['threads']}, {r['shape']}: model {model_flops(l, h, s, b) / 1e12:.4f} TFLOP/iteration; "
                   f"peaks FMA {r['fma_peak']:.1f}, GEMM {r['gemm_peak']:.1f} GFLOP/s; "
                   f"runs Tessera {', '.join(f'{x:.0f}' for x in r['tess_ms'])} ms, "
                   f"PyTorch {', '.join(f'{x:.0f}' for x in r['torch_ms'])} ms; PyTorch BLAS {r.get('blas', '?')}")
    if any("openblas" not in r.get("blas", "") for r in results):
        out.append("WARNING: PyTorch did not run OpenBLAS (e.g. the reference netlib BLAS, ~45x slower), so it is no "
                   "fair peer: apt-get install libopenblas0-openmp")
    out.append("")
    # Per-kernel breakdown of the last Tessera run of each configuration, in ms per iteration.
    timed = args.iters - 1  # the trainer resets the profile after its first iteration
    names = []
    for r in results:
        for n, (_, sec) in sorted(r["profile"].items(), key=lambda kv: -kv[1][1]):
            if n not in names:
                names.append(n)
    if names:
        out.append("Tessera time per iteration by kernel (ms; TESSERA_PROFILE, last round, warm-up left out):")
        out.append("")
        out.append("| kernel | " + " | ".join(f"t{r['threads']} {r['shape']}" for r in results) + " |")
        out.append("|---|" + "---:|" * len(results))
        for n in names:
            cells = []
            for r in results:
                calls_sec = r["profile"].get(n)
                step = r["profile"].get("train_step", (0, 0))[1]
                if calls_sec is None:
                    cells.append("")
                else:
                    share = f" ({100 * calls_sec[1] / step:.0f}%)" if step > 0 and n != "train_step" else ""
                    cells.append(f"{1e3 * calls_sec[1] / timed:.1f}{share}")
            out.append(f"| {n} | " + " | ".join(cells) + " |")
        cells = []
        for r in results:  # what no kernel row covers: the model's glue, copies, the optimizer's loops
            step = r["profile"].get("train_step", (0, 0))[1]
            rest = step - sum(sec for n, (_, sec) in r["profile"].items() if n != "train_step")
            cells.append(f"{1e3 * rest / timed:.1f} ({100 * rest / step:.0f}%)" if step > 0 else "")
        out.append("| rest of train_step, outside the kernels | " + " | ".join(cells) + " |")
        out.append("")
    disturbed = [f"{p} {o:.0f}%" for p, o in others if o > 5]
    out.append("CPU used by other processes: " + (", ".join(disturbed) + " (these phases are disturbed)" if disturbed
                                                   else f"at most {max(o for _, o in others):.0f}% in every phase"))
    out.append(f"load average at the end: {os.getloadavg()[0]:.2f}; logs in {args.out_dir}")
    text = "\n".join(out)
    print("\n" + text)
    with open(os.path.join(args.out_dir, "summary.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
