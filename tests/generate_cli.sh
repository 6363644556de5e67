#!/usr/bin/env bash
# tessera generate end to end: streaming, prompts from a file, stop strings, tokens/s, errors, and
# tensor-parallel generation under mpirun giving the tokens of one process. The tp1 and tp2 models are
# trained from the same seed (initialisation and dropout do not depend on the layout, and the padded
# vocabularies are made equal), so their weights agree up to rounding and greedy decoding agrees.
set -uo pipefail
tessera=${1:?usage: generate_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMPI_MCA_mpi_yield_when_idle=1
mpi=(mpirun --oversubscribe --allow-run-as-root -np 2)
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 64
       --mock-data --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 4 --global-batch-size 8
       --train-iters 40 --lr 3e-3 --log-interval 20 --eval-iters 0 --seed 7)
# vocabulary 61 pads to 64 at both sizes
# Both print greedy samples in the training log (--sample-interval); tp2 also with sequence parallelism.
sample=(--sample-interval 20 --sample-prompt "3 5 7")
"$tessera" train "${model[@]}" --make-vocab-size-divisible-by 64 --save "$work/tp1" "${sample[@]}" \
  >"$work/train1.log" 2>&1
rc=$?
check "tp1 training exits 0: $(tail -3 "$work/train1.log")" $rc
OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" train "${model[@]}" --make-vocab-size-divisible-by 32 \
  --tensor-model-parallel-size 2 --sequence-parallel --save "$work/tp2" "${sample[@]}" >"$work/train2.log" 2>&1
rc=$?
check "tp2 training exits 0: $(tail -3 "$work/train2.log")" $rc
s1=$(grep "sample at iteration" "$work/train1.log")
s2=$(grep "sample at iteration" "$work/train2.log")
[ "$(wc -l <<<"$s1")" -eq 2 ] && [[ "$(tail -1 <<<"$s1")" =~ "sample at iteration 40: 3 5 7"( [0-9]+)+$ ]]
check "--sample-interval 20 prints a greedy sample at iterations 20 and 40: $s1" $?
[ "$s1" = "$s2" ]
check "samples under tp2 + sequence parallelism equal one process: '$s1' vs '$s2'" $?
# An MoE model under tp2 + sequence parallelism: the sampler's decoding copy splits the experts as the
# trained model does (its expert groups), so it samples what one process does.
moe=("${model[@]}" --train-iters 2 --log-interval 1 --num-experts 4 --moe-router-topk 2 --sample-interval 2
     --sample-prompt "3 5 7")
"$tessera" train "${moe[@]}" --make-vocab-size-divisible-by 64 >"$work/moe1.log" 2>&1
rc=$?
check "MoE tp1 training with samples exits 0: $(tail -3 "$work/moe1.log")" $rc
OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" train "${moe[@]}" --make-vocab-size-divisible-by 32 \
  --tensor-model-parallel-size 2 --sequence-parallel >"$work/moe2.log" 2>&1
rc=$?
check "MoE tp2 + sequence parallel training with samples exits 0: $(grep -m3 error "$work/moe2.log")" $rc
s1=$(grep "sample at iteration" "$work/moe1.log")
s2=$(grep "sample at iteration" "$work/moe2.log")
[ -n "$s1" ] && [ "$s1" = "$s2" ]
check "MoE samples under tp2 + sequence parallelism equal one process: '$s1' vs '$s2'" $?
out=$("$tessera" train "${model[@]}" --sample-interval 5 2>&1)
[ $? -ne 0 ] && grep -qF -- "--sample-interval=5: needs --sample-prompt" <<<"$out"
check "--sample-interval without --sample-prompt is refused: $out" $?

# Bad values name the flag and the rule: not CLI11's "Value 0 not in range 0.000000 to 1797693...", and a
# negative seed is not wrapped to 2^64 - 5.
expect_failure "--micro-batch-size: 0 must be positive (" "$tessera" generate --load "$work/tp1" --prompt 3 \
  --micro-batch-size 0
expect_failure "--random-seed: -5 must be an integer >= 0" "$tessera" generate --load "$work/tp1" --prompt 3 \
  --random-seed=-5

# A prompt that does not fit is refused before anything is printed (the first prompt was streamed first).
out=$("$tessera" generate --load "$work/tp1" --prompt "3 5" --prompt "1 2 3" --tokens-to-generate 62 2>"$work/err")
[ $? -ne 0 ] && [ -z "$out" ] && grep -qF "prompt of 3 tokens + tokens to generate 62 exceeds the model's 64 positions" "$work/err"
check "a prompt too long for the model fails with nothing on stdout: '$out' $(cat "$work/err")" $?

# A --prompt-file with CRLF line ends gives the prompts without the carriage return (it was kept).
printf '3 5\r\n' > "$work/crlf.txt"
out=$("$tessera" generate --load "$work/tp1" --prompt-file "$work/crlf.txt" --tokens-to-generate 1 2>/dev/null)
[ $? -eq 0 ] && ! grep -q $'\r' <<<"$out" && [[ "$out" == "3 5 "* ]]
check "a CRLF prompt file's prompt has no carriage return: $(od -c <<<"$out" | head -2)" $?

# Streamed continuation: the prompt, then the ids; tokens/s on stderr.
out=$("$tessera" generate --load "$work/tp1" --prompt "3 5 7" --tokens-to-generate 12 --temperature 0 2>"$work/err")
rc=$?
check "generate exits 0: $out $(cat "$work/err")" $rc
[[ "$out" =~ ^"3 5 7"( [0-9]+){1,12}$ ]]
check "generate should print the prompt and up to 12 ids, got '$out'" $?
grep -qE "tokens in [0-9.e-]+ s \([0-9.e+-]+ tokens/s\)" "$work/err"
rc=$?
check "generate reports tokens/s: $(cat "$work/err")" $rc

# Prompts from a file, of different lengths: one line each, each equal to generating it alone.
printf '3 5 7\n11\n2 4 6 8 10 12\n' > "$work/prompts.txt"
batch=$("$tessera" generate --load "$work/tp1" --prompt-file "$work/prompts.txt" --tokens-to-generate 8 --temperature 0 2>/dev/null)
[ "$(wc -l <<<"$batch")" -eq 3 ]
check "--prompt-file with 3 prompts gives 3 lines: '$batch'" $?
alone=$("$tessera" generate --load "$work/tp1" --prompt "2 4 6 8 10 12" --tokens-to-generate 8 --temperature 0 2>/dev/null)
[ "$(sed -n 3p <<<"$batch")" = "$alone" ]
rc=$?
check "a prompt in a batch continues as it does alone: '$(sed -n 3p <<<"$batch")' vs '$alone'" $rc

# Sampling is reproducible with --random-seed.
a=$("$tessera" generate --load "$work/tp1" --prompt "1 2" --tokens-to-generate 10 --top-k 5 --random-seed 3 2>/dev/null)
b=$("$tessera" generate --load "$work/tp1" --prompt "1 2" --tokens-to-generate 10 --top-k 5 --random-seed 3 2>/dev/null)
[ "$a" = "$b" ]
check "the same --random-seed gives the same text: '$a' vs '$b'" $?

# A stop string ends generation after the token that completes it.
full=$("$tessera" generate --load "$work/tp1" --prompt "3 5 7" --tokens-to-generate 12 --temperature 0 2>/dev/null)
third=$(awk '{print $6}' <<<"$full")  # the third generated id
stopped=$("$tessera" generate --load "$work/tp1" --prompt "3 5 7" --tokens-to-generate 12 --temperature 0 \
          --stop " $third" 2>/dev/null)
first_at=$(awk -v t="$third" '{for (i = 4; i <= NF; i++) if ($i == t) {print i; exit}}' <<<"$full")
[ -n "$third" ] && [ "$(wc -w <<<"$stopped")" -eq "$first_at" ]
check "--stop ' $third' stops at its first occurrence: '$stopped' from '$full'" $?

# Tensor parallelism: two ranks generate what one process does.
one=$("$tessera" generate --load "$work/tp1" --prompt-file "$work/prompts.txt" --tokens-to-generate 16 --temperature 0 2>/dev/null)
two=$(OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" generate --load "$work/tp2" --tensor-model-parallel-size 2 \
      --prompt-file "$work/prompts.txt" --tokens-to-generate 16 --temperature 0 2>"$work/err")
rc=$?
check "tp2 generate exits 0: $(cat "$work/err")" $rc
[ -n "$one" ] && [ "$one" = "$two" ]
check "tp2 generation equals one process: '$one' vs '$two'" $?
one=$("$tessera" generate --load "$work/tp1" --prompt "4 9" --tokens-to-generate 16 --top-p 0.9 --random-seed 5 2>/dev/null)
two=$(OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" generate --load "$work/tp2" --tensor-model-parallel-size 2 \
      --prompt "4 9" --tokens-to-generate 16 --top-p 0.9 --random-seed 5 2>/dev/null)
[ -n "$one" ] && [ "$one" = "$two" ]
check "tp2 top-p sampling equals one process: '$one' vs '$two'" $?

# Pipeline parallelism: two stages (the tp1 checkpoint resharded by layer) generate what one process does.
one=$("$tessera" generate --load "$work/tp1" --prompt-file "$work/prompts.txt" --tokens-to-generate 16 --temperature 0 2>/dev/null)
two=$(OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" generate --load "$work/tp1" --pipeline-model-parallel-size 2 \
      --prompt-file "$work/prompts.txt" --tokens-to-generate 16 --temperature 0 2>"$work/err")
rc=$?
[ $rc -eq 0 ] && [ -n "$one" ] && [ "$one" = "$two" ]
rc=$?
check "pp2 generation equals one process: '$one' vs '$two' $(cat "$work/err")" $rc
one=$("$tessera" generate --load "$work/tp1" --prompt "4 9" --tokens-to-generate 16 --top-p 0.9 --random-seed 5 2>/dev/null)
two=$(OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" generate --load "$work/tp1" --pipeline-model-parallel-size 2 \
      --prompt "4 9" --tokens-to-generate 16 --top-p 0.9 --random-seed 5 2>/dev/null)
[ -n "$one" ] && [ "$one" = "$two" ]
check "pp2 top-p sampling equals one process: '$one' vs '$two'" $?

# Errors name the flag or the file.
out=$("$tessera" generate --load "$work/tp1" --prompt "3" --top-p 2 2>&1)
[ $? -ne 0 ] && grep -qF -- "--top-p=2: must be in [0, 1]" <<<"$out"
check "--top-p 2 must fail naming the flag: $out" $?
out=$("$tessera" generate --load "$work/tp1" 2>&1)
[ $? -ne 0 ] && grep -qF -- "--prompt or --prompt-file" <<<"$out"
check "no prompt must fail: $out" $?
out=$("$tessera" generate --load "$work/tp1" --prompt-file "$work/missing.txt" 2>&1)
[ $? -ne 0 ] && grep -qF "missing.txt: cannot open" <<<"$out"
check "a missing prompt file must be named: $out" $?
# An empty prompt is refused alike from --prompt and from --prompt-file (whose blank lines were skipped).
expect_failure "--prompt #2: an empty prompt, nothing to continue" "$tessera" generate --load "$work/tp1" \
  --prompt "3" --prompt ""
printf '3 5\n\n7\n' > "$work/blank.txt"
expect_failure "--prompt-file=$work/blank.txt line 2: an empty prompt" "$tessera" generate --load "$work/tp1" \
  --prompt-file "$work/blank.txt"
# The help's model group says what a flag left out does (the sentence was cut off: "the others are its").
out=$("$tessera" generate --help)
grep -q "those left out take its values" <<<"$out"
check "generate --help: the model flags' sentence is whole: $(grep -A1 'Option Group: model' <<<"$out")" $?
out=$("$tessera" generate --load "$work/tp1" --prompt "3 5" --tokens-to-generate 100 2>&1)
[ $? -ne 0 ] && grep -qF "exceeds the model's 64 positions" <<<"$out"
check "too many tokens must fail naming the positions: $out" $?
# A checkpoint saved at tp1 is resharded on load: two ranks generate what one process does.
one=$("$tessera" generate --load "$work/tp1" --prompt "3 5" --tokens-to-generate 12 --temperature 0 2>/dev/null)
two=$(OMP_NUM_THREADS=1 timeout 120 "${mpi[@]}" "$tessera" generate --load "$work/tp1" --tensor-model-parallel-size 2 \
      --prompt "3 5" --tokens-to-generate 12 --temperature 0 2>"$work/err")
rc=$?
[ $rc -eq 0 ] && [ -n "$one" ] && [ "$one" = "$two" ]
rc=$?
check "a tp1 checkpoint generated at tp2 equals one process (rc=$rc): '$one' vs '$two' $(cat "$work/err")" $rc

finish generate_cli
