#!/usr/bin/env bash
# End-to-end checks of `tessera train` as a user runs it: flag validation before any work, Megatron's
# log line, the JSON-lines and TensorBoard outputs, and clear errors for a damaged checkpoint.
set -uo pipefail
tessera=${1:?usage: train_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"

model="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3"

# expect_error "flags" "text the message must contain"
expect_error() { expect_failure "$2" "$tessera" train $1; }  # expect_error "flags" "text of the message"

expect_error "$model --train-iters 1 --num-attention-heads 5" "--hidden-size=32: must be divisible by --num-attention-heads=5"
expect_error "$model --train-iters 1 --group-query-attention --num-query-groups 3" "--num-query-groups=3: must divide --num-attention-heads=4"
expect_error "$model --train-iters 1 --global-batch-size 5" "--global-batch-size=5: must be divisible by --micro-batch-size=2"
expect_error "$model --train-iters 1 --max-position-embeddings 8" "--max-position-embeddings=8: must be >= --seq-length=16"
expect_error "$model --train-iters 1 --position-embedding-type alibi" "--position-embedding-type=alibi"
expect_error "$model --train-iters 1 --normalization BatchNorm" "--normalization=BatchNorm"
expect_error "$model --train-iters 1 --hidden-dropout 1.5" "--hidden-dropout=1.5: must be in [0, 1)"
expect_error "$model --train-iters 1 --lr-decay-style exponential" "--lr-decay-style"
expect_error "$model --train-iters 1 --no-such-flag 3" "--no-such-flag"
expect_error "$model --train-iters 0" "--train-iters=0: must be positive"
expect_error "$model --train-iters 1 --tensor-model-parallel-size 2" "--tensor-model-parallel-size=2"
expect_error "$model" "--train-iters"
# Megatron refuses a seed <= 0 and NumPy one of 2^32 or more; an unsigned flag must not wrap -1 silently.
expect_error "$model --train-iters 1 --seed=-1" "--seed: -1 must be a positive integer below 2^32"
expect_error "$model --train-iters 1 --seed 4294967296" "--seed: 4294967296 must be a positive integer below 2^32"
# A misspelled flag is named with the flag it is close to, before the required flag it leaves out.
expect_error "${model/--num-layers 2/--num-layer 2} --train-iters 1" "unknown flag --num-layer (did you mean --num-layers?)"
expect_error "$model --train-iters 1 --eval_iters 1" "unknown flag --eval_iters (did you mean --eval-iters?)"
# A flag given twice takes its last occurrence, and an error names that occurrence's value alone.
out=$("$tessera" train $model --train-iters 2 --train-iters 2.5 2>&1)
[ $? -ne 0 ] && grep -qF -- "--train-iters = 2.5" <<<"$out" && ! grep -qF "2,2.5" <<<"$out"
check "--train-iters 2 --train-iters 2.5: the error names 2.5 alone: $out" $?
expect_error "$model" "give --train-iters or --train-samples"
# --split is checked with --mock-data too; an unusable --data-cache-path or a file as --load is refused.
touch "$work/a_file"
expect_error "$model --train-iters 1 --split 98,2,x" "--split '98,2,x': 'x' is not a non-negative number"
expect_error "$model --train-iters 1 --data-cache-path $work/a_file/cache" \
  "--data-cache-path=$work/a_file/cache: $work/a_file is a file"
expect_error "$model --train-iters 1 --load $work/a_file" "--load=$work/a_file: is a file, not a checkpoint directory"
# pretrain_bert's help names pretrain_bert.
out=$("$tessera" pretrain_bert --help 2>&1)
[ $? -eq 0 ] && grep -q "^Usage: tessera pretrain_bert " <<<"$out" && ! grep -q "Usage: tessera train" <<<"$out" &&
  grep -q "BertWordPieceLowerCase" <<<"$out"
check "pretrain_bert --help names pretrain_bert and the BERT tokenizers: $(head -3 <<<"$out")" $?

# An unusable --save stops the run before training, not at the first save after hours of it.
touch "$work/a_file"
out=$("$tessera" train $model --train-iters 2 --log-interval 1 --save "$work/a_file/ckpt" --save-interval 2 2>&1)
[ $? -ne 0 ] && grep -qF -- "--save=$work/a_file/ckpt: cannot create the checkpoint directory" <<<"$out" &&
  ! grep -q "iteration        1/" <<<"$out"
check "a --save under a file fails before iteration 1: $out" $?
expect_error "$model --train-iters 1 --log-dir $work/a_file/logs" "--log-dir=$work/a_file/logs: cannot create the directory"
expect_error "$model --train-iters 1 --tensorboard-dir $work/a_file/tb" "--tensorboard-dir=$work/a_file/tb: cannot create"

# A short run: Megatron's log line, validation line, metrics and TensorBoard events, checkpoint.
out=$("$tessera" train $model --train-iters 4 --log-interval 2 --eval-interval 4 --eval-iters 1 \
      --log-dir "$work/logs" --tensorboard-dir "$work/tb" --save "$work/ckpt" --save-interval 2 2>&1)
check "short run exits 0: $out" $?
for field in "iteration        2/       4 |" "consumed samples:            8 |" "elapsed time per iteration (ms):" \
             "throughput per GPU (TFLOP/s/GPU):" "learning rate:" "global batch size:     4 |" "lm loss:" \
             "loss scale: 1.0 |" "grad norm:" "number of skipped iterations:   0 |" "number of nan iterations:   0 |" \
             "validation loss at iteration 4 | lm loss value:" "lm loss PPL:"; do
  grep -qF -- "$field" <<<"$out"
  check "log output lacks '$field'" $?
done
[ "$(grep -c '"lm_loss"' "$work/logs/metrics.jsonl")" -eq 2 ]
check "metrics.jsonl should have 2 iteration records" $?
ls "$work"/tb/events.out.tfevents.* >/dev/null 2>&1
check "no TensorBoard event file" $?
[ "$(cat "$work/ckpt/latest_checkpointed_iteration.txt")" = "4" ] && [ -f "$work/ckpt/iter_0000002/index.json" ]
check "checkpoints at iterations 2 and 4" $?

# A damaged checkpoint is reported with its path, and nothing runs.
cp -r "$work/ckpt" "$work/bad"
truncate -s 100 "$work/bad/iter_0000004/model.tp00.pp00.safetensors"
expect_error "$model --train-iters 6 --load $work/bad" "iter_0000004/model.tp00.pp00.safetensors"
echo "garbage" > "$work/bad/latest_checkpointed_iteration.txt"
expect_error "$model --train-iters 6 --load $work/bad" "latest_checkpointed_iteration.txt"
echo "3" > "$work/bad/latest_checkpointed_iteration.txt"
expect_error "$model --train-iters 6 --load $work/bad" "iter_0000003/index.json"

# Resuming the good checkpoint continues from iteration 4.
out=$("$tessera" train $model --train-iters 6 --log-interval 1 --eval-iters 0 --load "$work/ckpt" 2>&1)
check "resume exits 0: $out" $?
grep -qF "iteration        5/       6 |" <<<"$out" && ! grep -qF "iteration        1/" <<<"$out"
check "resume should start at iteration 5: $out" $?
# Resuming at --train-iters: nothing left to train, said so, and the evaluation after training, as Megatron.
out=$("$tessera" train $model --train-iters 4 --eval-iters 1 --load "$work/ckpt" 2>&1)
[ $? -eq 0 ] && grep -qF "nothing left to train: the checkpoint is at iteration 4 of --train-iters 4" <<<"$out" &&
  grep -qF "validation loss at iteration 4 on validation set" <<<"$out"
check "resume at --train-iters says nothing is left and evaluates: $out" $?

# Generation from the checkpoint: the prompt, then the requested number of ids, streamed.
out=$("$tessera" generate --load "$work/ckpt" --prompt "3 5 7" --tokens-to-generate 6 --temperature 0 2>/dev/null)
check "generate exits 0: $out" $?
[[ "$out" =~ ^"3 5 7"( [0-9]+){1,6}$ ]]
check "generate should print the prompt and up to 6 ids, got '$out'" $?
out=$("$tessera" generate --load "$work/ckpt" --prompt "3 5" --top-p 2 2>&1)
[ $? -ne 0 ] && grep -qF -- "--top-p=2: must be in [0, 1]" <<<"$out"
check "generate --top-p 2 must fail naming the flag: $out" $?
out=$("$tessera" generate --load "$work/nothing" --prompt "3" 2>&1)
[ $? -ne 0 ] && grep -qF "latest_checkpointed_iteration.txt is missing" <<<"$out"
check "generate from a missing checkpoint must fail naming the file: $out" $?

# tokenize: ids in, the same ids out (NullTokenizer), and a bad id is an error.
out=$(printf '1 2 3\n40\n' | "$tessera" tokenize --tokenizer-type NullTokenizer --vocab-size 40)
[ "$out" = "$(printf '1 2 3\n40')" ]
check "tokenize round trip, got '$out'" $?
printf '41\n' | "$tessera" tokenize --tokenizer-type NullTokenizer --vocab-size 40 >/dev/null 2>&1
[ $? -ne 0 ]
check "tokenize must reject id 41 of a 40-id NullTokenizer" $?

# tokenizer train + tokenize with SentencePiece: text -> ids -> the same text.
head -c 200000 "$(dirname "$0")/../data/eval/wiki.valid.tokens" > "$work/corpus.txt"
"$tessera" tokenizer train --input "$work/corpus.txt" --model-prefix "$work/spm" --vocab-size 400 \
  --model-type unigram >/dev/null
check "tokenizer train exits 0" $?
text="The history of the city"
out=$(echo "$text" | "$tessera" tokenize --tokenizer-type SentencePieceTokenizer --tokenizer-model "$work/spm.model" |
      "$tessera" tokenize --decode --tokenizer-type SentencePieceTokenizer --tokenizer-model "$work/spm.model")
[ "$out" = "$text" ]
check "SentencePiece round trip through tessera tokenize, got '$out'" $?
out=$("$tessera" tokenizer train --input "$work/corpus.txt" --model-prefix "$work/x" --model-type bpe2 2>&1)
[ $? -ne 0 ] && grep -qF -- "--model-type" <<<"$out"
check "tokenizer train --model-type bpe2 must fail naming the flag: $out" $?

finish train_cli
