#!/usr/bin/env bash
# Training throughput of Tessera against PyTorch on the same GPT, the same threads and the same machine,
# in one run, with the MFU measured against this machine's own fp32 GEMM peak.
#
# Usage: bench/throughput.sh [--quick]
#   --quick    a smoke run in a minute or two: 2 layers, seq 256, 3 iterations
# Environment (defaults are GPT-2 124M at seq 1024, batch 1):
#   THREADS=$(nproc) LAYERS=12 HIDDEN=768 HEADS=12 SEQ=1024 BATCH=1 ITERS=5 WARMUP=1
#   OPENBLAS_CORETYPE=Haswell   the OpenBLAS kernel set PyTorch's nn.Linear runs (see below)
#   SKIP_BUILD=1                benchmark the binaries already in build/release, without ninja
#   OUT_DIR=out/bench           where the raw logs go
#   WAIT_IDLE=300               seconds to wait, before each phase, for other work on the CPUs to end
# ITERS counts every iteration; the first WARMUP of them (primitive creation, first touch of the
# optimizer state) are left out and the median of the rest is reported, for both Tessera and PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
esac

THREADS=${THREADS:-$(nproc)}
if [ "$quick" = 1 ]; then
  LAYERS=${LAYERS:-2}; SEQ=${SEQ:-256}; ITERS=${ITERS:-3}
fi
LAYERS=${LAYERS:-12}
HIDDEN=${HIDDEN:-768}
HEADS=${HEADS:-12}
SEQ=${SEQ:-1024}
BATCH=${BATCH:-1}
ITERS=${ITERS:-5}
WARMUP=${WARMUP:-1}
VOCAB=50256  # GPT-2's; +1 EOD = 50257, padded to 50304 by both sides
OUT_DIR=${OUT_DIR:-out/bench}
WAIT_IDLE=${WAIT_IDLE:-300}
# Debian's OpenBLAS is built with DYNAMIC_ARCH: it picks a kernel set per CPU at load time and, on a CPU
# it does not recognise (some VMs), falls back to the slow generic Prescott kernels. So name the set:
# Haswell is the AVX2+FMA one (OpenBLAS's "Zen" reuses Haswell's sgemm kernel with other blocking);
# SkylakeX needs AVX-512 and dies with SIGILL without it, e.g. on this AMD EPYC (Zen 3).
if grep -qw avx512f /proc/cpuinfo; then default_core=SkylakeX; else default_core=Haswell; fi
OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$default_core}
PYTHON=/usr/bin/python3  # Debian's python3-torch lives here, not in a pyenv or venv python
if [ "$WARMUP" -ge "$ITERS" ]; then
  echo "ITERS ($ITERS) must exceed WARMUP ($WARMUP): nothing would be timed" >&2
  exit 2
fi

# All of them thread with OpenMP: oneDNN, Tessera's own loops, torch's intra-op pool, OpenBLAS-openmp.
export OMP_NUM_THREADS=$THREADS
mkdir -p "$OUT_DIR"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  # Incremental: ninja does nothing when the binaries are up to date.
  [ -f build/release/build.ninja ] || cmake --preset release >/dev/null
  ninja -C build/release tessera bench_gemm_peak >"$OUT_DIR/build.log" || { tail -30 "$OUT_DIR/build.log"; exit 1; }
fi
# Run copies: other engineers rebuild build/release on this machine, and a relink in the middle of a
# run would otherwise swap the binary under the benchmark.
bin=$OUT_DIR/bin
mkdir -p "$bin"
cp build/release/tessera build/release/bench_gemm_peak "$bin/"

# ---- Is the machine ours? ----
# CPU ticks busy and in total since boot, from /proc/stat.
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat; }
# Percent of the CPUs busy over the next second: before a phase starts, that is somebody else.
busy_now() {
  local a b
  a=$(cpu_ticks); sleep 1; b=$(cpu_ticks)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); printf "%.0f", 100 * (y[1] - x[1]) / (y[2] - x[2]) }'
}
# Other engineers compile on this machine at times: wait (up to WAIT_IDLE seconds) for them to finish.
wait_idle() {
  local waited=0 b
  while b=$(busy_now); [ "$b" -gt 10 ] && [ "$waited" -lt "$WAIT_IDLE" ]; do
    [ "$waited" -eq 0 ] && echo "  (CPUs ${b}% busy with other work: waiting up to ${WAIT_IDLE}s for them to be idle)"
    sleep 4; waited=$((waited + 5))
  done
}
# CPU seconds of this shell's finished children, into the variable named $1. `times` has to run in this
# shell: in a $(...) subshell it would count the subshell's children, not ours.
children_seconds_to() {
  times >"$OUT_DIR/.times"
  printf -v "$1" '%s' "$(tail -1 "$OUT_DIR/.times" |
    awk '{ for (i = 1; i <= 2; ++i) { split($i, t, /[ms]/); s += t[1] * 60 + t[2] } print s }')"
}
# How much of the CPUs somebody else used while a phase ran, in percent of all CPU time: what the whole
# machine spent busy minus what our own children spent. A few percent is noise; more means that the
# phase's numbers are disturbed and the run should be redone.
others_log=""
phase_start() {
  wait_idle
  children_seconds_to phase_children
  phase_ticks=$(cpu_ticks)
}
phase_end() {
  local ticks children pct
  ticks=$(cpu_ticks)
  children_seconds_to children
  pct=$(awk -v a="$phase_ticks" -v b="$ticks" -v c0="$phase_children" -v c1="$children" -v hz="$(getconf CLK_TCK)" '
    BEGIN { split(a, x, " "); split(b, y, " "); o = (y[1] - x[1]) - (c1 - c0) * hz; if (o < 0) o = 0
            printf "%.0f", 100 * o / (y[2] - x[2]) }')
  others_log+="$1 ${pct}%, "
  [ "$pct" -le 5 ] || echo "WARNING: other processes used ${pct}% of the CPUs during $1: its numbers are disturbed" >&2
}

# ---- The run ----
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; threads=$THREADS"
echo "tessera: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src apps 2>/dev/null || echo ' + uncommitted changes')"
echo "model: layers=$LAYERS hidden=$HIDDEN heads=$HEADS seq=$SEQ batch=$BATCH vocab=$VOCAB (padded 50304)"
echo "iterations: $ITERS, of which the first $WARMUP are warm-up"
echo "uptime:$(uptime)"

# The GEMM peak is measured before and after the two trainings and the higher one kept: the vCPUs'
# speed drifts by 10-15% over minutes (host-side load that /proc/stat does not show), and a peak
# measured in a slow minute would inflate the MFU.
echo "[1/4] GEMM peak (bench_gemm_peak)"
phase_start
"$bin/bench_gemm_peak" | tee "$OUT_DIR/gemm_peak.log"
phase_end gemm

echo "[2/4] tessera train"
phase_start
"$bin/tessera" train \
  --num-layers "$LAYERS" --hidden-size "$HIDDEN" --num-attention-heads "$HEADS" \
  --seq-length "$SEQ" --max-position-embeddings "$SEQ" \
  --mock-data --tokenizer-type NullTokenizer --vocab-size "$VOCAB" \
  --micro-batch-size "$BATCH" --global-batch-size "$BATCH" --train-iters "$ITERS" \
  --lr 1e-4 --clip-grad 1.0 --log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 \
  >"$OUT_DIR/tessera.log" 2>&1 || { tail -30 "$OUT_DIR/tessera.log"; exit 1; }
phase_end tessera
# The iteration lines, shortened to the counter and the time.
sed -n 's/.*\(iteration *[0-9]*\/ *[0-9]*\) |.*\(elapsed time per iteration (ms): [0-9.]*\).*/\1 | \2/p' \
  "$OUT_DIR/tessera.log"

echo "[3/4] PyTorch (bench/torch_gpt.py, OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE)"
phase_start
OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE "$PYTHON" bench/torch_gpt.py --threads "$THREADS" \
  --num-layers "$LAYERS" --hidden-size "$HIDDEN" --num-attention-heads "$HEADS" --seq-length "$SEQ" \
  --micro-batch-size "$BATCH" --vocab-size "$VOCAB" --iters "$ITERS" --warmup "$WARMUP" \
  2>&1 | tee "$OUT_DIR/torch.log"
phase_end torch

echo "[4/4] GEMM peak again"
phase_start
"$bin/bench_gemm_peak" | tee "$OUT_DIR/gemm_peak_after.log" | tail -1
phase_end gemm-again

# ---- The table: Python for the floats and the median ----
"$PYTHON" - "$OUT_DIR" "$LAYERS" "$HIDDEN" "$SEQ" "$BATCH" "$WARMUP" "$THREADS" <<'EOF' | tee "$OUT_DIR/summary.txt"
import re, statistics, sys
out, l, h, s, b, warmup, threads = sys.argv[1], *map(int, sys.argv[2:])
V = 50304  # padded vocabulary
read = lambda name: open(f"{out}/{name}").read()

peaks = [float(re.search(r"GEMM_PEAK_GFLOPS=([0-9.]+)", read(f)).group(1))
         for f in ("gemm_peak.log", "gemm_peak_after.log")]
peak = max(peaks)
tess = [float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", read("tessera.log"))]
tess_ms = statistics.median(tess[warmup:])
m = re.search(r"TORCH_MS_PER_ITER=([0-9.]+) .*blas=(\S+) corename=(\S+)", read("torch.log"))
torch_ms, blas, core = float(m.group(1)), m.group(2), m.group(3)

# Megatron's model FLOPs per iteration (GPT, MHA, no recompute): 12 b s l h^2 (1 + 1 + s/h + 4 + V/(2 l h)).
flops = 12 * b * s * l * h * h * (1 + 1 + s / h + 4 + V / (2 * l * h))
print(f"\nmodel FLOPs per iteration: {flops / 1e12:.3f} TFLOP; measured fp32 GEMM peak: {peak:.1f} GFLOP/s "
      f"at {threads} threads (before/after: {peaks[0]:.1f}/{peaks[1]:.1f})")
print(f"PyTorch BLAS: {blas} (OpenBLAS core: {core})")
if "openblas" not in blas:
    print("WARNING: PyTorch is not running OpenBLAS, so it is no fair peer: apt-get install libopenblas0-openmp")
print()
print(f"| {'':<8} | {'ms/iter':>9} | {'tokens/s':>9} | {'model TFLOP/s':>13} | {'MFU vs GEMM peak':>16} | {'vs PyTorch':>10} |")
print(f"|{'-' * 10}|{'-' * 11}|{'-' * 11}|{'-' * 15}|{'-' * 18}|{'-' * 12}|")
for name, ms in (("Tessera", tess_ms), ("PyTorch", torch_ms)):
    tflops = flops / (ms / 1000) / 1e12
    print(f"| {name:<8} | {ms:>9.1f} | {b * s / (ms / 1000):>9.1f} | {tflops:>13.4f} | "
          f"{tflops * 1e3 / peak * 100:>15.1f}% | {torch_ms / ms:>9.2f}x |")
print(f"\nTessera/PyTorch throughput ratio: {torch_ms / tess_ms:.2f}")
EOF
echo "CPU used by other processes during each phase: ${others_log%, } (uptime now:$(uptime))"
rm -f "$OUT_DIR/.times"
echo "logs: $OUT_DIR"
