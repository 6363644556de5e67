#!/usr/bin/env bash
# `tessera train` memory features as a user meets them: recomputation flags validated before any work,
# the theoretical memory report at start-up, and the measured memory line at each log interval.
set -uo pipefail
tessera=${1:?usage: memory_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1

model="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --train-iters 2 --log-interval 1 --eval-iters 0"

expect_error() { expect_failure "$2" "$tessera" train $1; }  # expect_error "flags" "text of the message"

expect_error "$model --recompute-granularity full" "--recompute-method=(none): must be uniform or block"
expect_error "$model --recompute-granularity partial" "--recompute-granularity=partial: must be full or selective"
expect_error "$model --recompute-granularity full --recompute-method uniform --recompute-num-layers 5" \
  "--recompute-num-layers=5: must be in [1, 4]"
expect_error "$model --recompute-method block" "--recompute-method=block: needs --recompute-granularity full"
expect_error "$model --recompute-activations --recompute-granularity full --recompute-method block" \
  "--recompute-activations=true: contradicts --recompute-granularity=full"
expect_error "$model --max-nan-iterations 0" "--max-nan-iterations=0: must be positive"

activations() { grep -oE "activations peak \(max over ranks\) [0-9.]+ \(theory [0-9.]+\)" <<<"$1" | tail -1; }
# Large enough that the activations show in MB with two decimals.
big="$model --hidden-size 128 --seq-length 64 --micro-batch-size 4 --global-batch-size 8"
plain=$("$tessera" train $big 2>&1)
check "plain run exits 0: $plain" $?
grep -qE "Theoretical memory footprints: weight and optimizer=[0-9.]+ MB, activation=[0-9.]+ MB, total=[0-9.]+ MB" <<<"$plain"
check "start-up report should end with Megatron's theoretical footprint line: $plain" $?
grep -qE "memory \(MB\): parameters [0-9.]+ \| gradients [0-9.]+ \| optimizer state [0-9.]+ \| activations peak" <<<"$plain"
check "each log interval should report measured memory: $plain" $?
full=$("$tessera" train $big --recompute-granularity full --recompute-method uniform 2>&1)
check "full recomputation run exits 0: $full" $?
[ "$(grep -oE "lm loss: [0-9.E+-]+" <<<"$full")" = "$(grep -oE "lm loss: [0-9.E+-]+" <<<"$plain")" ]
check "full recomputation should give the same losses" $?
# Measured activations equal the prediction, and full recomputation keeps far less.
for out in "$plain" "$full"; do
  read -r measured theory < <(activations "$out" | grep -oE "[0-9.]+" | tr '\n' ' ')
  awk -v m="$measured" -v t="$theory" 'BEGIN { exit !(m > 0 && (m - t) / t < 0.1 && (t - m) / t < 0.1) }'
  check "measured activations $measured MB should be within 10% of the theory $theory MB" $?
done
# Mixed precision keeps the activations in 16 bits: the theory follows, and they take about half.
bf16=$("$tessera" train $big --bf16 2>&1)
check "bf16 run exits 0: $bf16" $?
read -r measured theory < <(activations "$bf16" | grep -oE "[0-9.]+" | tr '\n' ' ')
awk -v m="$measured" -v t="$theory" 'BEGIN { exit !(m > 0 && (m - t) / t < 0.1 && (t - m) / t < 0.1) }'
check "bf16: measured activations $measured MB should be within 10% of the theory $theory MB" $?
p32=$(activations "$plain" | grep -oE "[0-9.]+" | head -1)
awk -v b="$measured" -v f="$p32" 'BEGIN { exit !(b < 0.55 * f) }'
check "bf16 activations ($measured MB) should take about half of fp32's ($p32 MB)" $?
p=$(activations "$plain" | grep -oE "[0-9.]+" | head -1)
f=$(activations "$full" | grep -oE "[0-9.]+" | head -1)
awk -v p="$p" -v f="$f" 'BEGIN { exit !(f * 4 < p) }'
check "full recomputation should keep under a quarter of the activations ($f vs $p MB)" $?

# With a large vocabulary the logits are most of what a micro-batch holds: the theory counts them (and the
# final norm, labels and ids) as the measurement does, so the two still agree.
vocab="$big --vocab-size 8000"
out=$("$tessera" train $vocab 2>&1)
check "large-vocabulary run exits 0: $out" $?
read -r measured theory < <(activations "$out" | grep -oE "[0-9.]+" | tr '\n' ' ')
awk -v m="$measured" -v t="$theory" 'BEGIN { exit !(m > 0 && (m - t) / t < 0.1 && (t - m) / t < 0.1) }'
check "vocab 8000: measured activations $measured MB should be within 10% of the theory $theory MB" $?
head=$(grep -oE "output layer per micro-batch \(fp32 logits shard, final norm, labels\): [0-9.]+" <<<"$out" | grep -oE "[0-9.]+$")
# 4 x 64 tokens x 8064 padded logits x 4 bytes = 7.9 MiB of logits alone.
awk -v h="$head" -v t="$theory" 'BEGIN { exit !(h > 7.8 && h < 0.9 * t) }'
check "the start-up report should show the output layer's $head MB (logits) inside the $theory MB" $?

# Mixture of experts: the theory counts what an MoE layer keeps (router, routed rows, the experts' rows
# and activations at k copies, shared expert), and zero bubble what the W passes hold from B to W (fp32
# GEMM inputs and output gradients, twice a 16-bit record's bytes under --bf16); both agree with the
# measurement, as the dense runs above.
within() {  # within "what" OUTPUT
  read -r measured theory < <(activations "$2" | grep -oE "[0-9.]+" | tr '\n' ' ')
  awk -v m="$measured" -v t="$theory" 'BEGIN { exit !(m > 0 && (m - t) / t < 0.1 && (t - m) / t < 0.1) }'
  check "$1: measured activations $measured MB should be within 10% of the theory $theory MB" $?
}
experts="--num-experts 4 --moe-router-topk 2"
moe="$big $experts"
for flags in "" "--moe-shared-expert-intermediate-size 128" "--moe-expert-capacity-factor 1.0 --moe-grouped-gemm --moe-pad-expert-input-to-capacity" "--bf16"; do
  out=$("$tessera" train $moe $flags 2>&1)
  check "MoE run $flags exits 0: $out" $?
  within "MoE $flags" "$out"
done
grep -qE "activation memory per MoE layer and micro-batch \(routing taken as balanced\): [0-9.]+ MB" <<<"$out"
check "the start-up report should show an MoE layer's activations: $out" $?
mpi2() { OMPI_MCA_mpi_yield_when_idle=1 mpirun --oversubscribe --allow-run-as-root -np 2 "$tessera" train "$@"; }
out=$(mpi2 $moe --tensor-model-parallel-size 2 --sequence-parallel 2>&1)
check "MoE at tp 2 with sequence parallelism exits 0: $out" $?
within "MoE at tp 2 + sp (each rank routes its sequence shard, the experts' rows gathered over etp)" "$out"
for zb in --enable-zero-bubble --zero-bubble-v-schedule; do
  out=$(mpi2 $big --pipeline-model-parallel-size 2 $zb --bf16 2>&1)
  check "$zb --bf16 at pp 2 exits 0: $out" $?
  within "$zb --bf16" "$out"
  grep -qE "zero bubble: what a chunk's W pass holds from its B to its W per micro-batch .*: [0-9.]+ MB" <<<"$out"
  check "$zb: the start-up report should show what the W pass holds: $out" $?
done
# The W passes of an MoE layer (each expert's GEMMs over its rows), of Multi-Latent Attention's projections,
# and of the multi-token prediction modules (their layers, eh_proj, their output layer; MoE as the last).
for flags in "$experts --enable-zero-bubble" \
             "--multi-latent-attention --q-lora-rank 32 --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8
              --v-head-dim 16 --position-embedding-type rope --enable-zero-bubble" \
             "$experts --mtp-num-layers 1 --zero-bubble-v-schedule"; do
  out=$(mpi2 $big $flags --pipeline-model-parallel-size 2 2>&1)
  check "pp 2 $flags exits 0: $out" $?
  within "pp 2 $flags" "$out"
done

# The log's measured peak of all tensors against the kernel's peak RSS: the tensors are resident (RSS
# at least their peak), and RSS exceeds them by no more than what a process holds without a model (the
# tiny run's RSS beyond its tensors) plus 15% for the heap's slack.
peaks() { grep -oE "all tensors peak \(max over ranks\) [0-9.]+ \| peak RSS \(max over ranks\) [0-9.]+" <<<"$1" | tail -1 | grep -oE "[0-9.]+" | tr '\n' ' '; }
tiny=$("$tessera" train $model 2>&1)
read -r tiny_tensors tiny_rss < <(peaks "$tiny")
large=$("$tessera" train $model --num-layers 4 --hidden-size 512 --vocab-size 8000 --seq-length 64 2>&1)
check "a 17M-parameter run exits 0: $large" $?
read -r tensors rss < <(peaks "$large")
awk -v t="$tensors" -v r="$rss" -v tt="$tiny_tensors" -v tr="$tiny_rss" \
  'BEGIN { exit !(t > 200 && r >= t && r <= t * 1.15 + (tr - tt)) }'
check "measured tensors $tensors MB should be resident (peak RSS $rss MB) and account for it (baseline $tiny_rss MB RSS beyond $tiny_tensors MB tensors)" $?

finish memory_cli
