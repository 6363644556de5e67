#!/usr/bin/env bash
# Megatron's ways of ending `tessera train` that scripts rely on: --exit-interval and
# --exit-duration-in-mins (save, print Megatron's line, exit 0; under mpirun every rank stops after the
# same iteration), the evaluation of the test split after training (skipped when the split has no
# documents, or after an exit), and --skip-train (evaluation only).
set -uo pipefail
tessera=${1:?usage: exit_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMPI_MCA_mpi_yield_when_idle=1

tok=(--tokenizer-type NullTokenizer --vocab-size 40)
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "${tok[@]}"
       --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-interval 100)
mock=("${model[@]}" --mock-data)
latest() { cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null; }

# The flags are validated before anything runs.
expect_failure "--exit-interval=-1: must be >= 0" "$tessera" train "${mock[@]}" --train-iters 2 --exit-interval -1
expect_failure "--exit-duration-in-mins=-2: must be a finite number >= 0" \
  "$tessera" train "${mock[@]}" --train-iters 2 --exit-duration-in-mins -2

# --exit-interval 3: saves at iteration 3 (beside --save-interval 2's checkpoint at 2), says so, exits 0,
# and does not evaluate the test split (an exit ends the program, as in Megatron).
out=$("$tessera" train "${mock[@]}" --train-iters 10 --eval-iters 1 --exit-interval 3 --save "$work/a" \
      --save-interval 2 2>&1)
check "--exit-interval 3 exits 0: $out" $?
grep -qE "^\[exiting program at iteration 3\] datetime: [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} $" <<<"$out"
check "Megatron's '[exiting program at iteration 3] datetime: ...' line: $out" $?
[ "$(latest "$work/a")" = 3 ] && [ -f "$work/a/iter_0000003/index.json" ] && [ -f "$work/a/iter_0000002/index.json" ]
ok=$?; check "checkpoints at iterations 2 and 3, the latest 3: $(ls "$work/a")" $ok
! grep -qF "iteration        4/" <<<"$out" && ! grep -qF "on test set" <<<"$out"
check "nothing after iteration 3, no test evaluation: $out" $?

# An exit at an iteration just saved by --save-interval saves once.
out=$("$tessera" train "${mock[@]}" --train-iters 10 --eval-iters 0 --exit-interval 2 --save "$work/b" \
      --save-interval 2 2>&1)
check "--exit-interval 2 --save-interval 2 exits 0: $out" $?
[ "$(grep -c "saved checkpoint at iteration 2 " <<<"$out")" -eq 1 ] && [ "$(latest "$work/b")" = 2 ]
check "one checkpoint at iteration 2: $out" $?

# Without --save there is nothing to save; the exit is the same.
out=$("$tessera" train "${mock[@]}" --train-iters 10 --eval-iters 0 --exit-interval 4 2>&1)
check "--exit-interval 4 without --save exits 0: $out" $?
grep -qF "[exiting program at iteration 4]" <<<"$out" && ! grep -qF "saved checkpoint" <<<"$out"
check "exit at iteration 4, no checkpoint: $out" $?

# --exit-duration-in-mins: a duration of 6 microseconds has passed by the end of the first iteration,
# whatever the machine, so the run stops long before --train-iters, saving where it stopped.
out=$("$tessera" train "${mock[@]}" --train-iters 1000 --eval-iters 0 --exit-duration-in-mins 1e-7 \
      --save "$work/c" 2>&1)
check "--exit-duration-in-mins exits 0: $out" $?
grep -qE "^\[exiting program after [0-9.e-]+ minutes\] datetime: " <<<"$out"
check "Megatron's '[exiting program after M minutes]' line: $out" $?
last=$(grep -o "iteration *[0-9]*/" <<<"$out" | tail -1 | grep -o "[0-9]*")
[ -n "$last" ] && [ "$last" -lt 1000 ] && [ "$(latest "$work/c")" = "$last" ]
ok=$?; check "stopped before iteration 1000 with a checkpoint at its last iteration ($last): $(ls "$work/c")" $ok

# Under mpirun the ranks agree (the largest elapsed time): one exit, one checkpoint, status 0. A rank
# stopping alone would leave the other in a collective, which the timeout would show.
out=$(OMP_NUM_THREADS=1 timeout 300 mpirun --oversubscribe --allow-run-as-root -np 2 "$tessera" train "${mock[@]}" \
      --train-iters 1000 --eval-iters 0 --exit-duration-in-mins 1e-7 --save "$work/d" 2>&1)
check "np 2 --exit-duration-in-mins exits 0: $out" $?
last=$(grep -o "iteration *[0-9]*/" <<<"$out" | tail -1 | grep -o "[0-9]*")
[ "$(grep -c "exiting program after" <<<"$out")" -eq 1 ] && [ -n "$last" ] && [ "$(latest "$work/d")" = "$last" ]
check "np 2: one exit line and a checkpoint at the last iteration ($last): $out" $?

# The test split is evaluated after training: Megatron's line, JSON lines and TensorBoard.
out=$("$tessera" train "${mock[@]}" --train-iters 2 --eval-iters 1 --save "$work/e" --log-dir "$work/logs" \
      --tensorboard-dir "$work/tb" 2>&1)
check "a run with a test split exits 0: $out" $?
grep -qE "^ validation loss at iteration 2 on test set \| lm loss value: [0-9.]+E[+-][0-9]+ \| lm loss PPL: [0-9.]+E[+-][0-9]+ \| $" <<<"$out"
check "Megatron's test line: $out" $?
[ "$(grep -c "validation loss at iteration 2 |" <<<"$out")" -eq 1 ]
check "the validation line at the last iteration is printed once: $out" $?
grep -qF '"test_lm_loss"' "$work/logs/metrics.jsonl"
ok=$?; check "metrics.jsonl has the test loss: $(cat "$work/logs/metrics.jsonl")" $ok
grep -qaF "lm loss test" "$work"/tb/events.out.tfevents.*
check "TensorBoard has 'lm loss test'" $?
out=$("$tessera" train "${mock[@]}" --train-iters 2 --eval-iters 0 2>&1)
check "--eval-iters 0 exits 0: $out" $?
! grep -qF "on test set" <<<"$out"
check "--eval-iters 0 evaluates no test split: $out" $?

# A real dataset of 20 documents: --split 949,50,1 gives the test split no documents, so it is skipped;
# --split 80,10,10 gives it 2, so it is evaluated.
for d in $(seq 1 20); do
  ids=$(for i in $(seq 0 $((30 + d))); do printf '%d ' $(( (d + i * (d % 4 + 1)) % 39 )); done)
  printf '{"text": "%s"}\n' "$ids"
done > "$work/docs.jsonl"
"$tessera" preprocess --input "$work/docs.jsonl" --output-prefix "$work/docs" --append-eod "${tok[@]}" >/dev/null 2>&1
check "preprocess exits 0" $?
data=(--data-path "$work/docs_text_document" --data-cache-path "$work/cache")
out=$("$tessera" train "${model[@]}" "${data[@]}" --split 949,50,1 --train-iters 2 --eval-iters 1 2>&1)
check "--split 949,50,1 over 20 documents exits 0: $out" $?
grep -qF "validation loss at iteration 2 |" <<<"$out" && ! grep -qF "on test set" <<<"$out"
check "a test split without documents is skipped: $out" $?
out=$("$tessera" train "${model[@]}" "${data[@]}" --split 80,10,10 --train-iters 2 --eval-iters 1 --save "$work/f" 2>&1)
check "--split 80,10,10 exits 0: $out" $?
grep -qF "validation loss at iteration 2 on test set | lm loss value:" <<<"$out"
check "a test split with documents is evaluated: $out" $?
test_line=$(grep "on test set" <<<"$out")
# No validation documents (--split 90,0,10): no validation, the test split still evaluated.
out=$("$tessera" train "${model[@]}" "${data[@]}" --split 90,0,10 --train-iters 2 --eval-iters 1 2>&1)
check "--split 90,0,10 exits 0: $out" $?
! grep -qF "validation loss at iteration 2 |" <<<"$out" && grep -qF "validation loss at iteration 2 on test set |" <<<"$out"
check "without validation documents the test split is evaluated: $out" $?

# --skip-train: the loaded iteration's validation and test evaluations, no training step.
out=$("$tessera" train "${model[@]}" "${data[@]}" --split 80,10,10 --train-iters 4 --eval-iters 1 --load "$work/f" \
      --skip-train 2>&1)
check "--skip-train exits 0: $out" $?
grep -qF "skipping training (--skip-train is on) ..." <<<"$out" && ! grep -qF "iteration        3/" <<<"$out"
check "--skip-train runs no iteration: $out" $?
grep -qF "validation loss at iteration 2 on validation set | lm loss value:" <<<"$out"
check "--skip-train evaluates the validation split: $out" $?
[ -n "$test_line" ] && [ "$(grep "on test set" <<<"$out")" = "$test_line" ]
check "--skip-train gives the same test loss as the end of training: '$test_line' vs $out" $?

finish exit_cli
