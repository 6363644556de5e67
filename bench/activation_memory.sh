#!/usr/bin/env bash
# Activation memory per rank, predicted (model/activation_memory.h) against measured (the bytes the
# activation records hold at the schedule's peak, from Tessera's own accounting: the layers, the ids and
# the output layer's logits), for recomputation and tensor/sequence/pipeline layouts, in fp32 and with
# --bf16 (activations kept in 16 bits); beside them the allocator's peak of all tensors and the kernel's
# peak RSS. Usage: bench/activation_memory.sh [path/to/tessera]
set -euo pipefail
tessera=${1:-build/release/tessera}
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
model="--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 8000 --micro-batch-size 2 --lr 1e-4 --train-iters 2
       --log-interval 2 --eval-iters 0"
echo "| layout | recomputation | per layer, Korthikanti 16-bit (MB) | per layer, Tessera (MB) | output layer per micro-batch (MB) | predicted activations per rank (MB) | measured (MB) | measured / predicted | all tensors peak (MB) | peak RSS (MB) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
run() {  # run RANKS "layout flags" "recompute flags"
  local out
  out=$(mpirun --oversubscribe --allow-run-as-root -np "$1" "$tessera" train $model $2 $3 2>&1)
  local k t h m p a r
  k=$(grep -oE "Korthikanti et al., 16-bit activations with dropout masks: [0-9.]+" <<<"$out" | grep -oE "[0-9.]+$" | head -1)
  t=$(grep -oE "activation memory per transformer layer and micro-batch: [0-9.]+" <<<"$out" | grep -oE "[0-9.]+$" | head -1)
  h=$(grep -oE "output layer per micro-batch \(fp32 logits shard, final norm, labels\): [0-9.]+" <<<"$out" | grep -oE "[0-9.]+$" | head -1)
  read -r a r < <(grep -oE "all tensors peak \(max over ranks\) [0-9.]+ \| peak RSS \(max over ranks\) [0-9.]+" <<<"$out" | tail -1 |
                  grep -oE "[0-9.]+" | tr '\n' ' '; echo)
  read -r m p < <(grep -oE "activations peak \(max over ranks\) [0-9.]+ \(theory [0-9.]+\)" <<<"$out" | tail -1 |
                  grep -oE "[0-9.]+" | tr '\n' ' '; echo)
  echo "| np $1 ${2:-(one process)} | ${3:-none} | $k | $t | $h | $p | $m | $(awk -v m="$m" -v p="$p" 'BEGIN { printf "%.3f", m / p }') | $a | $r |"
}
for layout in "1|" "2|--tensor-model-parallel-size 2" "2|--tensor-model-parallel-size 2 --sequence-parallel" \
              "4|--pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --global-batch-size 8"; do
  for recompute in "" "--recompute-activations" "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1" \
                   "--recompute-granularity full --recompute-method block --recompute-num-layers 1" "--bf16" \
                   "--bf16 --recompute-granularity full --recompute-method block --recompute-num-layers 1"; do
    run "${layout%%|*}" "${layout#*|}" "$recompute"
  done
done
