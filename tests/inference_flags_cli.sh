#!/usr/bin/env bash
# `tessera generate`, `serve` and `eval` take the model flags a Megatron launch script passes and check
# them against the checkpoint: agreeing flags change nothing, a conflict is an error naming the flag,
# the value given and the checkpoint's, and --use-checkpoint-args takes the checkpoint's instead.
set -uo pipefail
tessera=${1:?usage: inference_flags_cli.sh path/to/tessera}
work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/lib/checks.sh"

# A Llama-style model (rope, RMSNorm, SwiGLU, grouped-query attention, no biases), tied embeddings.
arch=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 32
      --ffn-hidden-size 64 --group-query-attention --num-query-groups 2 --position-embedding-type rope
      --normalization RMSNorm --swiglu --disable-bias-linear)
tok=(--tokenizer-type NullTokenizer --vocab-size 40)
"$tessera" train "${arch[@]}" "${tok[@]}" --mock-data --micro-batch-size 2 --global-batch-size 4 --train-iters 4 \
  --lr 3e-3 --eval-iters 0 --save "$work/ckpt" >"$work/train.log" 2>&1
ok=$?; check "training exits 0: $(tail -3 "$work/train.log")" $ok
# What a Megatron script adds beside the model: tokenizer, batch, precision-free flags.
script=("${arch[@]}" "${tok[@]}" --micro-batch-size 1)
gen=(--load "$work/ckpt" --prompt "3 5 7" --tokens-to-generate 8 --temperature 0)

plain=$("$tessera" generate "${gen[@]}" 2>/dev/null)
check "generate exits 0: $plain" $?
out=$("$tessera" generate "${gen[@]}" "${script[@]}" 2>&1 >"$work/out")
check "generate with the checkpoint's model flags exits 0: $out" $?
[ -n "$plain" ] && [ "$(cat "$work/out")" = "$plain" ]
ok=$?; check "agreeing model flags generate what no flags do: '$(cat "$work/out")' vs '$plain'" $ok

# Conflicts: the flag, the value given and the checkpoint's, every one of them.
expect_failure "--hidden-size=64 (the checkpoint's: 32): a model flag given must agree with the checkpoint" \
  "$tessera" generate "${gen[@]}" "${script[@]}" --hidden-size 64
expect_failure "--use-checkpoint-args" "$tessera" generate "${gen[@]}" --hidden-size 64
out=$("$tessera" generate "${gen[@]}" --normalization LayerNorm --group-query-attention --num-query-groups 4 --untie-embeddings-and-output-weights 2>&1)
[ $? -ne 0 ] && grep -qF -- "--num-query-groups=4 (the checkpoint's: 2); --normalization=LayerNorm (the checkpoint's: RMSNorm); --untie-embeddings-and-output-weights=true (the checkpoint's: false)" <<<"$out"
check "three conflicts are all named: $out" $?
expect_failure "--seq-length=64 (the checkpoint's: 16)" "$tessera" generate "${gen[@]}" --seq-length 64
expect_failure "--group-query-attention=true (1 query group" "$tessera" generate "${gen[@]}" --group-query-attention
# As in training, a model flag given twice takes its last value; --prompt still repeats.
out=$("$tessera" generate "${gen[@]}" --hidden-size 64 --hidden-size 32 2>/dev/null)
[ "$out" = "$plain" ]
check "--hidden-size 64 --hidden-size 32 is --hidden-size 32: '$out'" $?
out=$("$tessera" generate "${gen[@]}" "${script[@]}" --prompt "1 2" 2>/dev/null)
[ "$(wc -l <<<"$out")" -eq 2 ]
check "two --prompt give two continuations: '$out'" $?
# Flags that do not change what the weights compute are accepted whatever their value.
out=$("$tessera" generate "${gen[@]}" --hidden-dropout 0.3 --init-method-std 0.1 --make-vocab-size-divisible-by 8 2>/dev/null)
[ "$out" = "$plain" ]
check "dropout, initialisation and padding flags are accepted: '$out'" $?

# --use-checkpoint-args: the checkpoint's model, with a note naming what was not used.
out=$("$tessera" generate "${gen[@]}" --use-checkpoint-args --hidden-size 64 --normalization LayerNorm 2>"$work/err")
ok=$?; check "--use-checkpoint-args exits 0: $(cat "$work/err")" $ok
[ "$out" = "$plain" ] && grep -qF -- "--use-checkpoint-args: using the checkpoint's model configuration, not --hidden-size=64" "$work/err"
ok=$?; check "--use-checkpoint-args generates with the checkpoint's model: '$out', $(cat "$work/err")" $ok

# Tokenizer flags given are used: a NullTokenizer of another size does not fit the model.
expect_failure "has 51 ids but the checkpoint's model was trained on 41" \
  "$tessera" generate "${gen[@]}" --tokenizer-type NullTokenizer --vocab-size 50
# Precision flags: bf16 GEMM inputs run; both at once are refused.
out=$("$tessera" generate "${gen[@]}" "${script[@]}" --bf16 2>&1 >"$work/out")
check "generate --bf16 exits 0: $out" $?
[[ "$(cat "$work/out")" =~ ^"3 5 7"( [0-9]+){1,8}$ ]]
ok=$?; check "generate --bf16 prints ids: '$(cat "$work/out")'" $ok
expect_failure "--bf16=true: cannot be combined with --fp16" "$tessera" generate "${gen[@]}" --bf16 --fp16
# A tensor-parallel size the checkpoint's model does not split over is refused by flag and rule before the
# layout is built or a tensor read (2 query groups over 4 ranks; the padded vocabulary, 128, splits).
expect_failure "--tensor-model-parallel-size=4: the checkpoint in $work/ckpt has 2 query groups, which do not split evenly over that many ranks" \
  "$tessera" generate "${gen[@]}" --tensor-model-parallel-size 4

# eval: the same checks; its --seq-length is the evaluation window, not a model flag.
for i in $(seq 1 20); do seq -s ' ' $((i % 7)) 3 39; done > "$work/ids.txt"
ev=(--load "$work/ckpt" --task WIKITEXT103 --valid-data "$work/ids.txt" --overlapping-eval 16)
expect_failure "--num-layers=3 (the checkpoint's: 2)" "$tessera" eval "${ev[@]}" --num-layers 3
out=$("$tessera" eval "${ev[@]}" "${script[@]}" 2>&1)
check "eval with the checkpoint's model flags exits 0: $out" $?
grep -qF "validation results on WIKITEXT103 | avg loss:" <<<"$out"
check "eval prints its result: $out" $?

# serve: a conflict stops it before it listens; agreeing flags serve.
expect_failure "--ffn-hidden-size=128 (the checkpoint's: 64)" "$tessera" serve --load "$work/ckpt" --port 0 --ffn-hidden-size 128
"$tessera" serve --load "$work/ckpt" --port 0 "${script[@]}" >"$work/serve.log" 2>&1 &
server_pid=$!
served=1
for _ in $(seq 1 600); do
  grep -q "serving .* on http://127.0.0.1:[0-9]*" "$work/serve.log" && { served=0; break; }
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
check "serve with the checkpoint's model flags listens: $(cat "$work/serve.log")" $served
kill -TERM "$server_pid" 2>/dev/null
wait "$server_pid"
check "serve stops cleanly on SIGTERM" $?
server_pid=""

finish inference_flags_cli
