#!/usr/bin/env bash
# --moe-grouped-gemm against the local experts one GEMM each, in Tessera (bench_moe_grouped_gemm) and
# in PyTorch (bench/moe_grouped_gemm_torch.py: a loop of linears, and torch.bmm on padded rows), on the
# same experts, rows per expert and threads, in one run. Each shape twice: rows per expert with the
# fixed mild imbalance of dropless routing, and equal (--moe-pad-expert-input-to-capacity). Prints a
# Markdown table: milliseconds of forward + backward (medians), the grouped/loop ratios, and the
# grouped product's GFLOP/s (routed rows only, so padding shows) against this machine's GEMM peak
# (bench_gemm_peak at the same thread count).
#
# Usage: bench/moe_grouped_gemm.sh   Environment: OMP_NUM_THREADS (default: all cores), REPS=7,
#        SKIP_BUILD=1 (use build/release as it is)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
reps=${REPS:-7}
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  [ -f build/release/build.ninja ] || cmake --preset release >/dev/null
  ninja -C build/release bench_moe_grouped_gemm bench_gemm_peak >/dev/null
fi
bin=build/release
peak=$("$bin/bench_gemm_peak" --seconds 0.3 | grep -oE "GEMM_PEAK_GFLOPS=[0-9.]+" | cut -d= -f2)
field() { grep -oE "$1=[0-9.,]+" <<<"$2" | cut -d= -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), OMP_NUM_THREADS=$OMP_NUM_THREADS, GEMM peak $peak GFLOP/s"
echo "| experts × hidden × ffn, rows | biases | rows per expert | Tessera loop (ms) | Tessera grouped (ms) | grouped/loop | PyTorch loop (ms) | PyTorch bmm (ms) | bmm/loop | Tessera grouped / PyTorch bmm | grouped GFLOP/s (% of peak) |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
# experts hidden ffn rows bias
for shape in "8 128 512 2048 bias" "8 128 512 2048 none" "32 128 512 2048 bias" "8 256 1024 4096 bias" "8 512 2048 4096 none"; do
  read -r experts hidden ffn rows bias <<<"$shape"
  for balance in dropless padded; do
    flags=(--experts "$experts" --hidden "$hidden" --ffn "$ffn" --rows "$rows" --reps "$reps")
    [ "$balance" = padded ] && flags+=(--padded)
    torch_flags=()
    [ "$bias" = none ] && flags+=(--no-bias) && torch_flags+=(--no-bias)
    t=$("$bin/bench_moe_grouped_gemm" "${flags[@]}" | grep RESULT)
    counts=$(field counts "$t")
    p=$(/usr/bin/python3 bench/moe_grouped_gemm_torch.py --hidden "$hidden" --ffn "$ffn" --counts "$counts" \
          --reps "$reps" --threads "$OMP_NUM_THREADS" "${torch_flags[@]}" | grep RESULT)
    loop=$(field per_expert_ms "$t"); grouped=$(field grouped_ms "$t"); gflops=$(field gflops_grouped "$t")
    tloop=$(field loop_ms "$p"); tbmm=$(field bmm_ms "$p")
    range=$(tr ',' '\n' <<<"$counts" | sort -n | sed -n '1p;$p' | paste -sd '-')
    echo "| $experts × $hidden × $ffn, $rows | $bias | $range | $loop | $grouped | $(ratio "$grouped" "$loop") | $tloop | $tbmm | $(ratio "$tbmm" "$tloop") | $(ratio "$grouped" "$tbmm") | $gflops ($(awk -v g="$gflops" -v p="$peak" 'BEGIN { printf "%.0f%%", 100 * g / p }')) |"
  done
done
