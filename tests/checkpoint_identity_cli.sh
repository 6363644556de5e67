#!/usr/bin/env bash
# A checkpoint is the model and tokenizer it holds (issue 57, items 1-3, 8, 9):
# - train --load with a model or tokenizer flag changed is refused naming the flag and both values (one
#   process, and tp 2 x pp 2 on 4 ranks); --finetune takes a change that keeps the weights' shapes and
#   states it, refuses one that does not; a checkpoint tensor no parameter takes is an error naming it;
# - a checkpoint carries its tokenizer files: generate from another directory without tokenizer flags,
#   a resume with another merges file refused; the HF export has them under Hugging Face's names, no path
#   of this machine and no float32 noise in config.json, and its import generates the same text;
# - convert never writes into a non-empty --save-dir (--overwrite replaces it; a file is named);
# - a checkpoint whose optimizer files were removed generates, converts and resumes with --no-load-optim;
# - a damaged model configuration is refused by field, by generate and serve alike, and a key/value
#   buffer larger than the machine by its flag.
set -uo pipefail
tessera=${1:?usage: checkpoint_identity_cli.sh path/to/tessera}
tessera=$(cd "$(dirname "$tessera")" && pwd)/$(basename "$tessera")
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TESSERA_DATA_CACHE:-$root/data-cache}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
unset TESSERA_PROGRESS
[ -f "$cache/gpt2/gpt2-vocab.json" ] || { echo "FAIL: $cache/gpt2 is missing (scripts/setup.sh fetches it)"; exit 1; }

small=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16
       --mock-data --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 4
       --lr 1e-3 --log-interval 1 --eval-iters 0)
"$tessera" train "${small[@]}" --train-iters 2 --save "$work/base" >"$work/base.log" 2>&1
check "the base checkpoint trains: $(tail -3 "$work/base.log")" $?

# 1. Each model flag changed alone, and the tokenizer: refused, naming the flag and both values.
while IFS='|' read -r flags text; do
  # shellcheck disable=SC2086
  expect_failure "$text" "$tessera" train "${small[@]}" $flags --train-iters 4 --load "$work/base"
done <<'EOF'
--num-attention-heads 8|--num-attention-heads=8 (the checkpoint's: 4)
--position-embedding-type rope|--position-embedding-type=rope (the checkpoint's: learned_absolute)
--normalization RMSNorm|--normalization=RMSNorm (the checkpoint's: LayerNorm)
--disable-bias-linear|--disable-bias-linear=true (the checkpoint's: false)
--swiglu|--swiglu=true (the checkpoint's: false)
--num-layers 3|--num-layers=3 (the checkpoint's: 2)
--norm-epsilon 1e-6|--norm-epsilon=1e-06 (the checkpoint's: 1e-05)
--vocab-size 70|the tokenizer's vocabulary (ids)=71 (the checkpoint's: 61)
--num-experts 4|--num-experts=4 (the checkpoint's: 0)
EOF
out=$("$tessera" train "${small[@]}" --num-attention-heads 8 --position-embedding-type rope --normalization RMSNorm \
  --disable-bias-linear --train-iters 4 --load "$work/base" 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -qF "the checkpoint holds another model or tokenizer than these flags give: --num-attention-heads=8 (the checkpoint's: 4); --position-embedding-type=rope" <<<"$out" &&
  grep -qF -- "or --finetune to start a new run from its weights" <<<"$out" && ! grep -q "iteration " <<<"$out"
check "four changes at once: each named, before any iteration: $out" $?
out=$("$tessera" train "${small[@]}" --train-iters 4 --load "$work/base" 2>&1)
check "the same flags resume: $(tail -2 <<<"$out")" $?

# The same at tp 2 x pp 2 (4 ranks): every rank stops, rank 0 names the flag.
mpi=(mpirun --oversubscribe --allow-run-as-root -np 4)
layout=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)
"${mpi[@]}" "$tessera" train "${small[@]}" "${layout[@]}" --train-iters 2 --save "$work/tp2pp2" >"$work/tp2pp2.log" 2>&1
check "tp2 x pp2 trains: $(tail -3 "$work/tp2pp2.log")" $?
expect_failure "--hidden-size=64 (the checkpoint's: 32)" timeout 120 "${mpi[@]}" "$tessera" train "${small[@]}" \
  "${layout[@]}" --hidden-size 64 --train-iters 4 --load "$work/tp2pp2"

# --finetune: the same shapes are loaded and the change stated; other shapes are refused.
out=$("$tessera" train "${small[@]}" --num-attention-heads 8 --norm-epsilon 1e-6 --train-iters 2 --load "$work/base" \
  --finetune 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qF -- "--finetune: this model differs from the checkpoint's in --num-attention-heads=8 (the checkpoint's: 4); --norm-epsilon=1e-06 (the checkpoint's: 1e-05)" <<<"$out"
check "--finetune with 8 heads of 4 channels (the same weights' shapes) runs and says so: $out" $?
expect_failure "--load=$work/base --finetune: --num-layers=3 (the checkpoint's: 2): the checkpoint's weights have other names or shapes" \
  "$tessera" train "${small[@]}" --num-layers 3 --train-iters 2 --load "$work/base" --finetune
# A tensor in the checkpoint that no parameter takes (an index edited to hold one) is named.
cp -r "$work/base" "$work/extra"
python3 - "$work/extra/iter_0000002/index.json" <<'EOF'
import json, sys
index = json.load(open(sys.argv[1]))
index["tensors"]["decoder.layers.7.spare.weight"] = index["tensors"]["decoder.final_layernorm.weight"]
json.dump(index, open(sys.argv[1], "w"))
EOF
expect_failure "the checkpoint has tensor(s) this model has no parameter for: decoder.layers.7.spare.weight" \
  "$tessera" train "${small[@]}" --train-iters 4 --load "$work/extra"

# 3. The tokenizer travels with the checkpoint. GPT-2's files given by relative paths from $work.
mkdir -p "$work/gpt2"
cp "$cache/gpt2/gpt2-vocab.json" "$cache/gpt2/gpt2-merges.txt" "$work/gpt2/"
head -c 20000 "$root/data/eval/wiki.valid.tokens" | python3 -c '
import json, sys
for p in sys.stdin.read().split("\n \n"):
    if p.strip(): print(json.dumps({"text": p}))' >"$work/wiki.jsonl"
gpt2=(--tokenizer-type GPT2BPETokenizer --vocab-file gpt2/gpt2-vocab.json --merge-file gpt2/gpt2-merges.txt)
(cd "$work" && "$tessera" preprocess --input wiki.jsonl --output-prefix wiki --append-eod "${gpt2[@]}" >/dev/null 2>&1)
check "GPT-2 data preprocessed" $?
gmodel=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32
        --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1 --eval-iters 0 --split 100,0,0
        --data-path wiki_text_document "${gpt2[@]}")
(cd "$work" && "$tessera" train "${gmodel[@]}" --train-iters 2 --save gptckpt >gpt.log 2>&1)
check "a GPT-2-tokenizer model trains: $(tail -3 "$work/gpt.log")" $?
[ -f "$work/gptckpt/iter_0000002/tokenizer/gpt2-vocab.json" ] && [ -f "$work/gptckpt/iter_0000002/tokenizer/gpt2-merges.txt" ] &&
  grep -q "\"vocab_file\": \"$work/gpt2/gpt2-vocab.json\"" "$work/gptckpt/iter_0000002/index.json"
check "the checkpoint carries the tokenizer files and records absolute paths: $(ls "$work/gptckpt/iter_0000002")" $?
mv "$work/gpt2" "$work/gpt2-moved"  # the training paths are gone: only the carried copies remain
text1=$(cd / && "$tessera" generate --load "$work/gptckpt" --prompt "The history of" --tokens-to-generate 5 2>"$work/gen1.err")
check "generate from / without tokenizer flags: $text1 $(cat "$work/gen1.err")" $?
mv "$work/gpt2-moved" "$work/gpt2"
expect_failure "--tokenizer-type=NullTokenizer (the checkpoint's: GPT2BPETokenizer)" \
  "$tessera" train "${small[@]}" --train-iters 4 --load "$work/gptckpt"
head -n -1 "$work/gpt2/gpt2-merges.txt" >"$work/other-merges.txt"
(cd "$work" && "$tessera" train "${gmodel[@]}" --merge-file other-merges.txt --train-iters 4 --load gptckpt >other.log 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -qF -- "--merge-file=other-merges.txt (the checkpoint's: another file, carried as $work/gptckpt/iter_0000002/tokenizer/gpt2-merges.txt)" "$work/other.log"
check "a resume with another merges file of the same vocabulary is refused: $(tail -2 "$work/other.log")" $?

# The HF export: the tokenizer under Hugging Face's names, no path of this machine, short floats.
"$tessera" convert --loader tessera --saver hf --load-dir "$work/gptckpt" --save-dir "$work/hf" >/dev/null 2>&1
check "convert to hf" $?
[ -f "$work/hf/vocab.json" ] && [ -f "$work/hf/merges.txt" ] &&
  grep -q '"tokenizer_class": "GPT2Tokenizer"' "$work/hf/tokenizer_config.json" && ! grep -qF "$work" "$work/hf/config.json" &&
  grep -q '"attn_pdrop": 0.1,' "$work/hf/config.json" && grep -q '"layer_norm_epsilon": 1e-05,' "$work/hf/config.json"
check "the export has vocab.json, merges.txt, tokenizer_config.json, no local path, short floats: $(ls "$work/hf"; grep -E 'pdrop|epsilon|vocab_file' "$work/hf/config.json")" $?
"$tessera" convert --loader hf --saver tessera --load-dir "$work/hf" --save-dir "$work/back" >/dev/null 2>&1
check "convert back from hf" $?
text2=$(cd / && "$tessera" generate --load "$work/back" --prompt "The history of" --tokens-to-generate 5 2>"$work/gen2.err")
[ "$text1" = "$text2" ]
check "the imported checkpoint generates the same text without tokenizer flags: '$text1' vs '$text2' $(cat "$work/gen2.err")" $?

# 2. convert writes only into a new or empty --save-dir, or replaces it with --overwrite.
expect_failure "--save-dir=$work/base: is not empty (it holds iter_0000002, latest_checkpointed_iteration.txt); give a new or empty directory, or --overwrite" \
  "$tessera" convert --loader hf --saver tessera --load-dir "$work/hf" --save-dir "$work/base"
[ "$(cat "$work/base/latest_checkpointed_iteration.txt")" = 2 ] && [ "$(ls "$work/base")" = "$(printf 'iter_0000002\nlatest_checkpointed_iteration.txt')" ]
check "the refused directory is untouched: $(ls "$work/base")" $?
touch "$work/a-file"
expect_failure "--save-dir=$work/a-file: is a file, not a directory" \
  "$tessera" convert --loader tessera --saver hf --load-dir "$work/base" --save-dir "$work/a-file"
mkdir -p "$work/unrelated" && touch "$work/unrelated/notes.txt"
expect_failure "it holds notes.txt" "$tessera" convert --loader tessera --saver hf --load-dir "$work/base" --save-dir "$work/unrelated"
"$tessera" convert --loader tessera --saver hf --load-dir "$work/base" --save-dir "$work/hf" --overwrite >/dev/null 2>&1
rc=$?
[ $rc -eq 0 ] && [ ! -f "$work/hf/vocab.json" ] && grep -q '"vocab_size": 128' "$work/hf/config.json"
check "--overwrite replaces the earlier export whole (the NullTokenizer model has no tokenizer files): $(ls "$work/hf")" $?

# 9. Weights alone: the optimizer files removed.
cp -r "$work/gptckpt" "$work/weights"
rm "$work/weights/iter_0000002"/optim.*
text3=$("$tessera" generate --load "$work/weights" --prompt "The history of" --tokens-to-generate 5 2>"$work/gen3.err")
[ "$text3" = "$text1" ]
check "generate from a checkpoint without its optimizer files: $text3 $(cat "$work/gen3.err")" $?
"$tessera" convert --loader tessera --saver hf --load-dir "$work/weights" --save-dir "$work/hf-weights" >/dev/null 2>&1
check "convert a checkpoint without its optimizer files" $?
(cd "$work" && "$tessera" train "${gmodel[@]}" --train-iters 4 --load weights >w.log 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -qF "(the optimizer state; --no-load-optim or --finetune loads the weights alone)" "$work/w.log"
check "resuming it with its optimizer names the missing file and the flags: $(tail -2 "$work/w.log")" $?
(cd "$work" && "$tessera" train "${gmodel[@]}" --train-iters 4 --load weights --no-load-optim >w2.log 2>&1)
check "--no-load-optim resumes it: $(tail -2 "$work/w2.log")" $?

# 8. A damaged model configuration: refused by field, before anything is sized by it.
cp -r "$work/base" "$work/zero"
sed -i 's/"num_layers": *2/"num_layers": 0/' "$work/zero/iter_0000002/index.json"
expect_failure "--load=$work/zero: model configuration: num_layers is 0, must be between 1 and 2^31" \
  "$tessera" generate --load "$work/zero" --prompt "3 5"
expect_failure "model configuration: num_layers is 0" timeout 60 "$tessera" serve --load "$work/zero" --port 0
expect_failure "model configuration: num_layers is 0" "$tessera" train "${small[@]}" --train-iters 4 --load "$work/zero"
# A key/value buffer larger than the machine: refused by flag, not a std::bad_alloc.
expect_failure "--inference-dynamic-batching-buffer-size-gb=100000: more than this machine's memory (" \
  timeout 60 "$tessera" serve --load "$work/base" --port 0 --inference-dynamic-batching-buffer-size-gb 100000

finish checkpoint_identity_cli
