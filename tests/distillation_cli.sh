#!/usr/bin/env bash
# Knowledge distillation as a user runs it (README "Knowledge distillation"): the flags and the teacher's
# checkpoint checked before any work; a distilled run logs the KD term as "kd loss" in the log line, the
# validation line and the metrics; staged distillation says when it stops and logs the term as 0 after.
set -uo pipefail
tessera=${1:?usage: distillation_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"

common=(--hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --tokenizer-type NullTokenizer
        --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --eval-iters 0)
student=(--num-layers 2 "${common[@]}")

# A teacher: deeper and wider (the tests of src/train/distillation*_test.cc distil MoE teachers too).
out=$("$tessera" train --num-layers 3 "${common[@]}" --hidden-size 64 --train-iters 2 \
      --save "$work/teacher" 2>&1)
check "the teacher trains and saves: $out" $?

# Before any work (the rest of the rules: src/train/distillation_test.cc).
expect_failure "--kd=set: needs --load-teacher DIR" "$tessera" train "${student[@]}" --train-iters 1 --kd
# The teacher was saved with Megatron's default --make-vocab-size-divisible-by 128.
expect_failure "the teacher's padded vocabulary is 128, the student's 256" "$tessera" train "${student[@]}" \
  --train-iters 1 --kd --load-teacher "$work/teacher" --make-vocab-size-divisible-by 256

out=$("$tessera" train "${student[@]}" --train-iters 3 --log-interval 1 --eval-interval 1 --eval-iters 1 \
      --kd --load-teacher "$work/teacher" --kd-temp 2 --kd-stop-iteration 2 --log-dir "$work/logs" 2>&1)
check "a distilled run exits 0: $out" $?
grep -qF "knowledge distillation: loss alpha * CE + beta * tau^2 * KL(teacher || student) with alpha 1, beta 1, tau 2, until iteration 2; teacher from $work/teacher: 3 layers, hidden size 64" <<<"$out"
check "the start-up line says what is distilled from what: $out" $?
grep -E "iteration +1/ +3 \|" <<<"$out" | grep -qE "lm loss: [0-9.E+-]+ \| kd loss: [1-9][0-9.]*E"
check "iteration 1 logs a non-zero kd loss after the lm loss: $out" $?
grep -qE "validation loss at iteration 1 \| lm loss value: [0-9.E+-]+ \| lm loss PPL: [0-9.E+-]+ \| kd loss value: [1-9]" <<<"$out"
check "the validation at iteration 1 has the kd loss: $out" $?
grep -qF "knowledge distillation stopped after iteration 2 (--kd-stop-iteration): training on the LM loss alone" <<<"$out"
check "the stop is announced: $out" $?
grep -E "iteration +3/ +3 \|" <<<"$out" | grep -qF "kd loss: 0.000000E+00"
check "iteration 3 logs the kd loss as 0: $out" $?
grep -q '"kd loss"' "$work/logs/metrics.jsonl"
check "the metrics have the kd loss: $(head -c 600 "$work/logs/metrics.jsonl")" $?

finish distillation_cli
