#!/usr/bin/env bash
# Speed of --bf16 and --fp16 against fp32 on GPT-2 124M (12 layers, hidden 768, 12 heads, seq 1024,
# vocabulary 50257 padded to 50304), mock data, one process. The precisions run alternately, `rounds`
# times, so that a machine shared with other work loads them alike; each run's time per iteration is
# the median of its iterations after the first (warm-up), and the table gives the fastest round (the
# one least disturbed by other work).
# Prints the CPU, the features and GEMM path of the start-up line, tokens/s and the ratio to fp32.
# Usage: bench/mixed_precision_gpt2.sh [path/to/tessera] [iterations] ["micro-batch sizes"] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
tessera=${1:-build/release/tessera}
iters=${2:-4}
mbs_list=${3:-"1 2"}
rounds=${4:-3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
model=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
       --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --train-iters "$iters" --lr 1e-4
       --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-iters 0)

ms() { grep -oE "elapsed time per iteration \(ms\): [0-9.]+" <<<"$1" | grep -oE "[0-9.]+$" | tail -n +2 |
       sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
best() { tr ' ' '\n' <<<"$1" | grep . | sort -n | head -1; }

echo "CPU: $(lscpu | grep 'Model name' | sed 's/.*: *//'), OMP_NUM_THREADS=$OMP_NUM_THREADS, load before: $(uptime | sed 's/.*load average: //')"
declare -A times line
for mbs in $mbs_list; do
  for ((r = 0; r < rounds; ++r)); do
    for precision in fp32 bf16 fp16; do
      flag=""; [ "$precision" != fp32 ] && flag=--$precision
      out=$("$tessera" train "${model[@]}" --micro-batch-size "$mbs" --global-batch-size "$mbs" $flag 2>&1)
      times[$mbs,$precision]+="$(ms "$out") "
      [ "$precision" != fp32 ] && line[$precision]=$(grep -oE "mixed precision: .*accumulation \([^)]*\)" <<<"$out" | head -1)
    done
  done
done
echo "load after: $(uptime | sed 's/.*load average: //')"
for precision in bf16 fp16; do echo "$precision start-up line: ${line[$precision]}"; done
echo
echo "| micro-batch size | precision | ms/iteration (best of $rounds runs) | tokens/s | vs fp32 | runs (ms) |"
echo "|---:|---|---:|---:|---:|---|"
for mbs in $mbs_list; do
  ref=$(best "${times[$mbs,fp32]}")
  for precision in fp32 bf16 fp16; do
    m=$(best "${times[$mbs,$precision]}")
    awk -v mbs="$mbs" -v p="$precision" -v m="$m" -v ref="$ref" -v runs="${times[$mbs,$precision]}" 'BEGIN {
      printf "| %d | %s | %.1f | %.1f | %.3f | %s|\n", mbs, p, m, mbs * 1024 * 1000 / m, ref / m, runs }'
  done
done
