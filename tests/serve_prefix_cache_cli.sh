#!/usr/bin/env bash
# Prefix caching in tessera serve (infer/prefix_cache.h): requests sharing prefixes (multiple-choice
# endings of one context, a repeated system prompt, a prompt of whole blocks, one echoing its prompt's
# log-probs) get the same tokens and log-probs with the cache on (the default), off
# (--no-inference-dynamic-batching-enable-prefix-caching) and on over two tensor-parallel ranks; /metrics
# counts exactly the prompt tokens of the full blocks earlier requests filled, and the closing line says
# them. Chunked prefill (--enable-chunked-prefill, 5 tokens a step) changes no answer either (over tp and
# pp layouts: batch_decoder_mpi_test). One tiny CPU model, loopback only.
set -uo pipefail
tessera=${1:?usage: serve_prefix_cache_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT
source "$here/lib/checks.sh"
source "$here/lib/server.sh"
export OMPI_MCA_mpi_yield_when_idle=1
"$tessera" train --mock-data --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 64 \
  --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 64 \
  --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 10 --log-interval 10 --eval-iters 0 --seed 7 \
  --save "$work/ckpt" >"$work/train.log" 2>&1
rc=$?
check "training exits 0: $(tail -3 "$work/train.log")" $rc

block=8
run() {  # run NAME SERVER-COMMAND...: the client's answers in $work/NAME.json, the server's log in $work/NAME.log
  local name=$1
  shift
  start_server "$work/$name.log" "$@" --load "$work/ckpt" --port 0 --inference-dynamic-batching-block-size $block \
    --inference-dynamic-batching-buffer-size-gb 0.001
  rc=$?
  check "the $name server starts: $(cat "$work/$name.log")" $rc
  timeout 60 python3 "$here/serve_prefix_cache_client.py" "$port" $block "$work/$name.json"
  check "the $name client is answered" $?
  stop_server
  check "the $name server stops: $(tail -2 "$work/$name.log")" $?
}
run on "$tessera" serve
run off "$tessera" serve --no-inference-dynamic-batching-enable-prefix-caching
run tp2 env OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 "$tessera" serve \
  --tensor-model-parallel-size 2
# Chunked prefill (issue 52): prompts of up to 26 tokens read 5 tokens a step (chunks that do not divide
# them).
run chunked "$tessera" serve --enable-chunked-prefill --inference-dynamic-batching-max-tokens 5

compare() {  # compare A B: the same answers, tokens equal and log-probs within 1e-5
  python3 - "$work/$1.json" "$work/$2.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["answers"] for p in sys.argv[1:3])
def same(x, y, where):
    if isinstance(x, float) or isinstance(y, float):
        assert abs(x - y) <= 1e-5, (where, x, y)
    elif isinstance(x, dict):
        assert x.keys() == y.keys(), (where, x.keys(), y.keys())
        for k in x: same(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, list):
        assert len(x) == len(y), (where, x, y)
        for i in range(len(x)): same(x[i], y[i], f"{where}[{i}]")
    else:
        assert x == y, (where, x, y)
assert len(a) == len(b) == 9, (len(a), len(b))
same(a, b, "answers")
PY
}
out=$(compare on off 2>&1)
check "the cache changes no answer: $out" $?
out=$(compare on tp2 2>&1)
check "two tensor-parallel ranks with the cache answer as one process: $out" $?
out=$(compare on chunked 2>&1)
check "chunked prefill changes no answer: $out" $?
grep -qF "chunked prefill on (at most 5 tokens a step)" "$work/chunked.log" && grep -qF "chunked prefill off" "$work/on.log"
check "the start-up line says whether prompts are chunked: $(grep -ho "chunked prefill [^;]*" "$work/chunked.log" "$work/on.log")" $?
out=$("$tessera" serve --load "$work/ckpt" --port 0 --inference-dynamic-batching-max-tokens 8 2>&1)
rc=$?
[ $rc = 1 ] && grep -qF -- "--inference-dynamic-batching-max-tokens=8: needs --enable-chunked-prefill" <<<"$out"
check "a step budget without --enable-chunked-prefill is refused, naming the flag: $out" $?

counters() {  # counters NAME: "hits queries expected"
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); m = r["metrics"]
print(m["tessera:prefix_cache_hits_total"], m["tessera:prefix_cache_queries_total"], r["expected_hits"])' "$work/$1.json"
}
read -r hits queries expected <<<"$(counters on)"
[ "$expected" -gt 0 ] && [ "$hits" = "$expected" ] && [ "$queries" -gt "$hits" ]
check "/metrics counts the prompt tokens read from the cache: $hits of $queries (expected $expected)" $?
for name in tp2 chunked; do
  read -r hits2 _ _ <<<"$(counters $name)"
  [ "$hits2" = "$expected" ]
  check "the $name server reads as many from the cache: $hits2" $?
done
read -r hits_off queries_off _ <<<"$(counters off)"
[ "$hits_off" = 0 ] && [ "$queries_off" = 0 ]
check "with the cache off nothing is looked up: $hits_off of $queries_off" $?
grep -qF "prefix cache: $hits of $queries prompt tokens read from the cache" "$work/on.log" &&
  grep -qF "prefix caching on" "$work/on.log" && grep -qF "prefix caching off" "$work/off.log"
check "the log lines say it: $(grep -h "prefix" "$work/on.log" "$work/off.log")" $?
finish serve_prefix_cache_cli
