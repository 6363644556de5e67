#!/usr/bin/env bash
# tessera eval --server-url: the zero-shot tasks scored through a running tessera serve (each window sent
# as lm-evaluation-harness's loglikelihood request: token ids, echo, logprobs 1, max_tokens 0) give the
# numbers of the local evaluation of the same checkpoint (WIKITEXT103's loss within 2e-4 relative, the
# printed precision; LAMBADA's count of correct answers equal). The flag's errors name flag, value and
# rule; a server that is down is named. One tiny CPU model, the first lines of data/eval, loopback only.
set -uo pipefail
tessera=${1:?usage: eval_server_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/data/eval
cache=${TESSERA_DATA_CACHE:-$root/data-cache}
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT
source "$root/tests/lib/checks.sh"
source "$root/tests/lib/server.sh"
[ -f "$cache/gpt2/gpt2-vocab.json" ] || skip "no GPT-2 vocabulary in $cache/gpt2 (scripts/setup.sh fetches it)"
tokenizer=(--tokenizer-type GPT2BPETokenizer --vocab-file "$cache/gpt2/gpt2-vocab.json"
           --merge-file "$cache/gpt2/gpt2-merges.txt")

"$tessera" train --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --num-layers 2 --hidden-size 32 \
  --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 2 \
  --train-iters 2 --lr 1e-3 --eval-iters 0 --save "$work/model" >"$work/train.log" 2>&1
rc=$?
check "training the tiny model exits 0: $(tail -3 "$work/train.log")" $rc
head -n 12 "$data/wiki.test.tokens" > "$work/wiki.tokens"
head -n 6 "$data/lambada_test.jsonl" > "$work/lambada.jsonl"
tasks=("WIKITEXT103 $work/wiki.tokens" "LAMBADA $work/lambada.jsonl")

for t in "${tasks[@]}"; do
  set -- $t
  "$tessera" eval --load "$work/model" "${tokenizer[@]}" --task "$1" --valid-data "$2" --seq-length 32 \
    >"$work/local_$1.log" 2>&1
  rc=$?
  check "local eval $1 exits 0: $(tail -3 "$work/local_$1.log")" $rc
done

start_server "$work/serve.log" "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 --served-model-name tiny
rc=$?
check "the server starts and prints its port: $(cat "$work/serve.log")" $rc
url=http://127.0.0.1:$port
for t in "${tasks[@]}"; do
  set -- $t
  "$tessera" eval --server-url "$url" "${tokenizer[@]}" --task "$1" --valid-data "$2" --seq-length 32 \
    >"$work/server_$1.log" 2>&1
  rc=$?
  check "eval $1 through the server exits 0: $(tail -3 "$work/server_$1.log")" $rc
  grep -q "scoring through $url (model tiny)" "$work/server_$1.log"
  rc=$?
  check "eval names the server and its model: $(head -3 "$work/server_$1.log")" $rc
  python3 - "$work/local_$1.log" "$work/server_$1.log" <<'PY'
import re, sys
def values(path):
    line = [l for l in open(path) if "validation results on" in l][0]
    return line, [float(v) for v in re.findall(r"[0-9.]+E[+-][0-9]+", line)]
(local_line, local), (server_line, server) = values(sys.argv[1]), values(sys.argv[2])
ok = len(local) == len(server) >= 3 and all(abs(a - b) <= 2e-4 * abs(a) for a, b in zip(local, server))
print("" if ok else f"FAIL: local {local_line!r} vs server {server_line!r}", end="")
sys.exit(0 if ok else 1)
PY
  check "eval $1 through the server gives the local evaluation's numbers" $?
done

expect_failure "--server-url=$url: cannot be combined with --load=$work/model" \
  "$tessera" eval --server-url "$url" --load "$work/model" "${tokenizer[@]}" --task LAMBADA --valid-data "$work/lambada.jsonl" \
  --seq-length 32
expect_failure "--server-url=$url: needs --seq-length" \
  "$tessera" eval --server-url "$url" "${tokenizer[@]}" --task LAMBADA --valid-data "$work/lambada.jsonl"
expect_failure "--seq-length=64: a window and its last label (65 tokens) exceed the server's max_model_len 64" \
  "$tessera" eval --server-url "$url" "${tokenizer[@]}" --task LAMBADA --valid-data "$work/lambada.jsonl" --seq-length 64
expect_failure "--server-url=localhost:$port: expected http://HOST:PORT" \
  "$tessera" eval --server-url "localhost:$port" "${tokenizer[@]}" --task LAMBADA --valid-data "$work/lambada.jsonl" \
  --seq-length 32
expect_failure "--load: required (or --server-url" \
  "$tessera" eval "${tokenizer[@]}" --task LAMBADA --valid-data "$work/lambada.jsonl"
stop_server
rc=$?
check "SIGTERM stops the server with exit status 0: $(tail -3 "$work/serve.log")" $rc
expect_failure "--server-url=$url: no server answers there" \
  "$tessera" eval --server-url "$url" "${tokenizer[@]}" --task LAMBADA --valid-data "$work/lambada.jsonl" --seq-length 32

finish eval_server_cli
