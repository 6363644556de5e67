#!/usr/bin/env bash
# tessera serve end to end: Megatron's REST API checked by tests/serve_client.py against one process,
# then the same greedy requests against a tensor-parallel server under mpirun (2 ranks), and clean
# shutdown on SIGTERM in both cases. Loopback only.
set -uo pipefail
tessera=${1:?usage: serve_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
source "$(dirname "$0")/lib/server.sh"
export OMPI_MCA_mpi_yield_when_idle=1
mpi=(mpirun --oversubscribe --allow-run-as-root -np 2)
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 64
       --mock-data --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 4 --global-batch-size 8
       --train-iters 40 --lr 3e-3 --log-interval 20 --eval-iters 0 --seed 7)
"$tessera" train "${model[@]}" --make-vocab-size-divisible-by 64 --save "$work/tp1" >"$work/train1.log" 2>&1
rc=$?
check "tp1 training exits 0: $(tail -3 "$work/train1.log")" $rc
OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" train "${model[@]}" --make-vocab-size-divisible-by 32 \
  --tensor-model-parallel-size 2 --save "$work/tp2" >"$work/train2.log" 2>&1
rc=$?
check "tp2 training exits 0: $(tail -3 "$work/train2.log")" $rc

limits=(--port 0 --max-prompts 4 --max-tokens-to-generate 40 --max-body-bytes 4096)
start_server "$work/serve1.log" "$tessera" serve --load "$work/tp1" "${limits[@]}"
rc=$?
check "the server starts and prints its port: $(cat "$work/serve1.log")" $rc
python3 "$here/serve_client.py" "http://127.0.0.1:$port" 4096
check "REST API checks (serve_client.py)" $?
greedy='{"prompts": ["3 5 7", "2 4 6 8 10", "1"], "tokens_to_generate": 20, "top_k": 1}'
one=$(curl -s -X PUT -H 'Content-Type: application/json' -d "$greedy" "http://127.0.0.1:$port/api")
sampled='{"prompts": ["4 9"], "tokens_to_generate": 20, "top_p": 0.8, "random_seed": 11}'
one_sampled=$(curl -s -X PUT -H 'Content-Type: application/json' -d "$sampled" "http://127.0.0.1:$port/api")
grep -qF "request from 127.0.0.1: PUT /api" "$work/serve1.log"
check "requests are logged" $?
stop_server
rc=$?
check "SIGTERM stops the server with exit status 0: $(tail -3 "$work/serve1.log")" $rc
grep -qF "server stopped" "$work/serve1.log"
check "the server says it stopped" $?

# Two tensor-parallel ranks answer as one process does.
start_server "$work/serve2.log" env OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" serve --load "$work/tp2" \
  --tensor-model-parallel-size 2 "${limits[@]}"
rc=$?
check "the tp2 server starts: $(cat "$work/serve2.log")" $rc
two=$(curl -s -X PUT -H 'Content-Type: application/json' -d "$greedy" "http://127.0.0.1:$port/api")
same_tokens() {  # same_tokens JSON1 JSON2: the "tokens" of two /api responses are equal
  python3 -c 'import json,sys; a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2]); sys.exit(a["tokens"] != b["tokens"])' "$1" "$2" 2>/dev/null
}
same_tokens "$one" "$two"
check "tp2 greedy tokens equal one process: $one vs $two" $?
two_sampled=$(curl -s -X PUT -H 'Content-Type: application/json' -d "$sampled" "http://127.0.0.1:$port/api")
same_tokens "$one_sampled" "$two_sampled"
check "tp2 sampled tokens equal one process: $one_sampled vs $two_sampled" $?
status=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -d '{"prompts": 3}' "http://127.0.0.1:$port/api")
[ "$status" = 400 ]
check "tp2 server answers a bad request with 400 (got $status)" $?
two_again=$(curl -s -X PUT -H 'Content-Type: application/json' -d "$greedy" "http://127.0.0.1:$port/api")
[ "$two" = "$two_again" ]
check "tp2 server goes on after a bad request" $?
# Streaming under tp2: the chunks add up to the one-process text; a client that leaves mid-stream has its
# sequence dropped on both ranks between the same steps (else their collectives would part ways), and the
# server answers the next request as before.
python3 - "$port" <<'PY'
import json, sys, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/v1/completions"
def post(body):
    return urllib.request.urlopen(urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                                         headers={"Content-Type": "application/json"}), timeout=60)
body = {"prompt": "3 5 7", "max_tokens": 40, "temperature": 0}
whole = json.loads(post(body).read())["choices"][0]["text"]
events = [e[len("data: "):] for e in post(dict(body, stream=True)).read().decode().split("\n\n") if e]
streamed = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
if events[-1] != "[DONE]" or streamed != whole:
    sys.exit(f"tp2 stream {streamed!r} (last event {events[-1]!r}) vs whole {whole!r}")
# Closed as soon as the stream's headers arrive: 40 tokens leave the server time to notice (the tiny
# model decodes them in a few milliseconds).
post({"prompt": "3 5 7", "max_tokens": 40, "temperature": 0.9, "seed": 3, "stream": True}).close()
PY
check "tp2 streams the whole response's text, and a client may leave mid-stream" $?
two_after=$(curl -s -X PUT -H 'Content-Type: application/json' -d "$greedy" "http://127.0.0.1:$port/api")
same_tokens "$one" "$two_after"
check "tp2 greedy tokens are the same after a client left mid-stream: $two_after" $?
grep -q "client of a streamed request went away: dropped its 1 sequence(s)" "$work/serve2.log"
check "tp2 dropped the sequence of the client that left: $(grep -i 'went away\|streamed' "$work/serve2.log")" $?
stop_server
status=$?
# mpirun itself exits 1 whenever it is signalled; every rank must still stop cleanly, in time.
[ "$status" -ne 124 ] && grep -qF "server stopped" "$work/serve2.log" && ! grep -qi "abort\|killed" "$work/serve2.log"
rc=$?
check "SIGTERM to mpirun stops every rank cleanly (mpirun status $status): $(tail -5 "$work/serve2.log")" $rc

# Flag errors name the flag.
out=$("$tessera" serve --load "$work/tp1" --port 70000 2>&1)
[ $? -ne 0 ] && grep -qF -- "--port" <<<"$out"
check "--port 70000 must fail naming the flag: $out" $?

finish serve_cli
