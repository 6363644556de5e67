#!/usr/bin/env bash
# `tessera train --pipeline-token-slices` (TeraPipe's token slicing, issue 36; on one stage the slices of
# each micro-batch run one after another, with per-layer key/value caches): the same loss
# values as the unsliced run, GPT-2 and Llama style with dropout on, at tp 2 (with and without sequence
# parallelism) and dp 2 too, with multi-token prediction (its mtp_k losses too), and the refusals naming
# the flag.
set -uo pipefail
tessera=${1:?usage: token_slices_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun="mpirun --oversubscribe --allow-run-as-root"

model="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --train-iters 4 --log-interval 1 --eval-iters 0 --hidden-dropout 0.1 --attention-dropout 0.1"
llama="--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention
       --num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights"

losses() { grep -o 'lm loss: [0-9.E+-]*' <<<"$1" | awk '{print $3}'; }

# same_losses "name" "extra flags" "slices" [ranks]
same_losses() {
  local whole sliced run="$tessera"
  [ -n "${4:-}" ] && run="$mpirun -np $4 $tessera"
  whole=$($run train $model $2 2>&1)
  check "$1 unsliced run exits 0: $whole" $?
  sliced=$($run train $model $2 --pipeline-token-slices "$3" 2>&1)
  check "$1 run with --pipeline-token-slices $3 exits 0: $sliced" $?
  grep -qF "token slices (TeraPipe, --pipeline-token-slices $3)" <<<"$sliced"
  check "$1 log names the slices: $sliced" $?
  local a b
  a=$(losses "$whole"); b=$(losses "$sliced")
  [ "$(wc -l <<<"$a")" -eq 4 ] && [ -n "$b" ]
  check "$1 should log 4 losses: $a" $?
  python3 - "$a" "$b" <<'PY'
import sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ok = len(a) == len(b) and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b))
sys.exit(0 if ok else 1)
PY
  check "$1 losses with --pipeline-token-slices $3 ($(echo $b)) should be the unsliced ones ($(echo $a))" $?
}

same_losses "gpt2" "" 4
same_losses "llama" "$llama" 3,5,8
# Each rank slices its own micro-batches: tensor parallelism (heads and caches split by rank) and data
# parallelism (with the distributed optimizer and overlapped reduction) give their unsliced losses.
same_losses "llama tp 2" "$llama --tensor-model-parallel-size 2" 4 2
same_losses "gpt2 tp 2 sequence parallel" "--tensor-model-parallel-size 2 --sequence-parallel" 4,8,4 2
same_losses "gpt2 dp 2" "--use-distributed-optimizer --overlap-grad-reduce --global-batch-size 8" 5,3,8 2
same_losses "gpt2 bf16 recomputed" "--bf16 --recompute-granularity full --recompute-method uniform" 6,10

# Memory: the report lists the caches, and the measured activation peak (which counts them) is the
# theory's, in bf16 (fp32 caches instead of 16-bit stored keys and values) and under full recomputation
# (the caches outlive the recomputed layers' records), and above the unsliced run's.
big="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --mock-data --tokenizer-type
     NullTokenizer --vocab-size 40 --micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --train-iters 1
     --log-interval 1 --eval-iters 0"
peak() { grep -o 'activations peak (max over ranks) [0-9.]* (theory [0-9.]*)' <<<"$1" | head -1 | tr -d '()' |
         awk '{print $6, $8}'; }
for extra in "--bf16" "--recompute-granularity full --recompute-method uniform"; do
  whole=$("$tessera" train $big $extra 2>&1)
  sliced=$("$tessera" train $big $extra --pipeline-token-slices 4 2>&1)
  grep -qF "token-slice key/value caches per micro-batch (--pipeline-token-slices, fp32" <<<"$sliced" &&
    grep -qE "backward\): 0\.25 MB" <<<"$sliced"
  check "$extra: the report lists 0.25 MB of caches: $sliced" $?
  read -r measured theory <<<"$(peak "$sliced")"
  read -r unsliced _ <<<"$(peak "$whole")"
  [ -n "$measured" ] && [ "$measured" = "$theory" ] && python3 -c "import sys; sys.exit(not $measured > $unsliced)"
  check "$extra: sliced activation peak $measured should be its theory $theory and above the unsliced $unsliced" $?
done

# Across 2 pipeline stages the theory walks the sliced schedule (a later micro-batch's first slices run
# while the caches of the one before, and their gradients, are still held): the measured peak is its own.
sliced=$($mpirun -np 2 "$tessera" train $big --bf16 --pipeline-model-parallel-size 2 --pipeline-token-slices 8,24,32 2>&1)
read -r measured theory <<<"$(peak "$sliced")"
[ -n "$measured" ] && [ "$measured" = "$theory" ]
check "pp 2: sliced activation peak $measured should be its theory $theory: $sliced" $?

# Multi-token prediction (issue 53): the modules run over the whole sequence after the last slice, so the
# log's lm and mtp_k losses are the unsliced run's, on one stage and at pp 2, and at pp 2 the activation peak
# (the modules' record arriving with the last slice, their gradient leaving slice by slice) is its theory.
mtp="--position-embedding-type rope --mtp-num-layers 2"
all_losses() { grep -oE '(lm|mtp_[12]) loss: [0-9.E+-]*' <<<"$1" | awk '{print $3}'; }
for ranks in 1 2; do
  run="$tessera" pp=""
  [ "$ranks" = 2 ] && run="$mpirun -np 2 $tessera" pp="--pipeline-model-parallel-size 2"
  a=$(all_losses "$($run train $model $mtp $pp 2>&1)")
  b=$(all_losses "$($run train $model $mtp $pp --pipeline-token-slices 3,5,8 2>&1)")
  python3 - "$a" "$b" <<'PY'
import sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
sys.exit(0 if len(a) == 12 and len(a) == len(b) and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)) else 1)
PY
  check "MTP on $ranks stage(s): the sliced lm and mtp_k losses ($(echo $b)) should be the unsliced ones ($(echo $a))" $?
done
sliced=$($mpirun -np 2 "$tessera" train $big $mtp --pipeline-model-parallel-size 2 --pipeline-token-slices 8,24,32 2>&1)
read -r measured theory <<<"$(peak "$sliced")"
[ -n "$measured" ] && [ "$measured" = "$theory" ]
check "pp 2 with MTP: sliced activation peak $measured should be its theory $theory: $sliced" $?

# Checkpoints hold no trace of the slicing: saved sliced and resumed unsliced, or the reverse, the
# resumed iterations log the same losses.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
short="${model/--train-iters 4/--train-iters 2} --save-interval 2"
"$tessera" train $short --save "$work/sliced" --pipeline-token-slices 4 >/dev/null 2>&1
check "sliced run saves" $?
"$tessera" train $short --save "$work/whole" >/dev/null 2>&1
check "unsliced run saves" $?
a=$(losses "$("$tessera" train $model --load "$work/sliced" 2>&1)")
b=$(losses "$("$tessera" train $model --load "$work/whole" --pipeline-token-slices 2,14 2>&1)")
[ "$(wc -l <<<"$a")" -eq 2 ] && [ "$a" = "$b" ]
check "resumed losses: saved sliced, resumed whole ($(echo $a)) vs saved whole, resumed sliced ($(echo $b))" $?

# Refusals, before any work, naming the flag and the rule.
expect_failure "--pipeline-token-slices=5: 5 equal slices must divide --seq-length=16" \
  "$tessera" train $model --pipeline-token-slices 5
expect_failure "--pipeline-token-slices=8,4: the slice lengths sum to 12, not --seq-length=16" \
  "$tessera" train $model --pipeline-token-slices 8,4
# auto: TeraPipe's dynamic program chooses at start-up and says what it chose and from whose costs.
out=$("$tessera" train $model --pipeline-token-slices auto 2>&1); ok=$?
check "--pipeline-token-slices auto trains: $(tail -3 <<<"$out")" $ok
grep -qE '> token slices \(auto\): [0-9,]+ \(TeraPipe.s dynamic program, costs from ' <<<"$out"; ok=$?
check "auto logs the chosen slices and the source of its costs: $(grep -m1 'token slices' <<<"$out")" $ok
expect_failure "--pipeline-token-slices=4: cannot be combined with --reset-attention-mask" \
  "$tessera" train $model --pipeline-token-slices 4 --reset-attention-mask
# Across pipeline stages (src/train/token_slices_mpi_test.cc) the slices flow through one chunk per stage.
expect_failure "--pipeline-token-slices=4: cannot be combined with the interleaved schedule (--num-virtual-stages-per-pipeline-rank 2)" \
  $mpirun -np 2 "$tessera" train ${model/--num-layers 2/--num-layers 4} --pipeline-token-slices 4 \
  --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2
expect_failure "--pipeline-token-slices=5,11: slice length 5 must be divisible by --tensor-model-parallel-size=2 with --sequence-parallel" \
  $mpirun -np 2 "$tessera" train $model --pipeline-token-slices 5,11 --tensor-model-parallel-size 2 --sequence-parallel

finish token_slices_cli
