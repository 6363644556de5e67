#!/usr/bin/env bash
# Continuous batching in tessera serve: requests sent all at once are decoded together (the server's
# closing line counts the sequences per step) and each gets exactly the tokens (and log-probabilities) it
# gets alone, in one process and on two pipeline stages under mpirun; the bound on waiting sequences
# answers 503 with a clear message; a request larger than the key/value cache gets 400 naming the flag;
# bad batching flags are refused before the server starts. Loopback only.
set -uo pipefail
tessera=${1:?usage: serve_batching_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT
source "$here/lib/checks.sh"
source "$here/lib/server.sh"
export OMPI_MCA_mpi_yield_when_idle=1
common=(--mock-data --tokenizer-type NullTokenizer --vocab-size 60 --make-vocab-size-divisible-by 64
        --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --log-interval 20 --eval-iters 0 --seed 7)
"$tessera" train "${common[@]}" --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 \
  --max-position-embeddings 128 --train-iters 20 --save "$work/small" >"$work/train.log" 2>&1
rc=$?
check "training exits 0: $(tail -3 "$work/train.log")" $rc

# Twelve requests: prompts of different lengths, greedy and sampled, different lengths to generate, one
# with log-probabilities, one with two prompts.
python3 - "$work/requests.json" <<'PY'
import json, sys
bodies = []
for i in range(12):
    prompt = " ".join(str((7 * i + 3 * j) % 59 + 1) for j in range(1 + (5 * i) % 9))
    body = {"prompts": [prompt], "tokens_to_generate": 10 + (7 * i) % 31}
    body.update({"top_k": 1} if i % 3 == 0 else {"top_p": 0.9, "random_seed": 100 + i})
    bodies.append(body)
bodies[4]["logprobs"] = True
bodies[7]["prompts"].append("5 6 7")
json.dump(bodies, open(sys.argv[1], "w"))
PY
alone() {  # alone PORT: every request of requests.json sent one after another, as a JSON list like serve_concurrent.py's
  python3 - "$1" "$work/requests.json" <<'PY'
import json, sys, urllib.request
out = []
for body in json.load(open(sys.argv[2])):
    req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/api", data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        out.append([resp.status, json.loads(resp.read())])
print(json.dumps(out))
PY
}
same_answers() {  # same_answers A B: the same statuses, tokens and (to 1e-4) log-probabilities
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert len(a) == len(b) == 12, (len(a), len(b))
for i in range(len(a)):
    (sa, ra), (sb, rb) = a[i], b[i]
    assert sa == sb == 200, (i, sa, sb, ra, rb)
    assert ra["tokens"] == rb["tokens"], (i, ra["tokens"], rb["tokens"])
    if ra["logprobs"] is not None:
        for la, lb in [(ra["logprobs"][p], rb["logprobs"][p]) for p in range(len(ra["logprobs"]))]:
            assert len(la) == len(lb) and all(abs(la[t] - lb[t]) <= 1e-4 for t in range(len(la))), (i, la, lb)
PY
}
batching=(--port 0 --inference-max-requests 4 --inference-dynamic-batching-block-size 8)
start_server "$work/serve1.log" "$tessera" serve --load "$work/small" "${batching[@]}"
rc=$?
check "the server starts and prints its port: $(cat "$work/serve1.log")" $rc
together=$(python3 "$here/serve_concurrent.py" "$port" "$work/requests.json")
one_by_one=$(alone "$port")
same_answers "$together" "$one_by_one"
check "requests decoded together get the tokens they get alone: $(same_answers "$together" "$one_by_one" 2>&1 | tail -1)" $?
stop_server
rc=$?
check "SIGTERM stops the server with exit status 0: $(tail -3 "$work/serve1.log")" $rc
line=$(grep "server stopped after" "$work/serve1.log")
most=$(grep -o "at most [0-9]* sequences" <<<"$line" | grep -o "[0-9]*")
[ -n "$most" ] && [ "$most" -ge 2 ] && [ "$most" -le 4 ]
check "sequences were decoded together, at most --inference-max-requests 4 at once: $line" $?
# The step timing line: steps of every size decoded, none larger than the bound (times are not checked).
timing=$(grep "step time: the model's forward" "$work/serve1.log")
sizes=$(grep -o " [0-9]*: [0-9]* x " <<<"$timing" | grep -o "^ [0-9]*" | tr -d ' ')
[ -n "$sizes" ] && [ "$(sort -n <<<"$sizes" | tail -1)" -le 4 ] && [ "$(sort -n <<<"$sizes" | tail -1)" -ge 2 ]
check "the closing step timing splits the steps by size, 2 to 4 sequences at most: $timing" $?

# Two pipeline stages (the checkpoint resharded by layer at load) answer the same burst as one process.
start_server "$work/serve2.log" env OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 \
  "$tessera" serve --load "$work/small" --pipeline-model-parallel-size 2 "${batching[@]}"
rc=$?
check "the pp2 server starts: $(cat "$work/serve2.log")" $rc
pp2=$(python3 "$here/serve_concurrent.py" "$port" "$work/requests.json")
same_answers "$together" "$pp2"
check "pp2 answers the burst as one process: $(same_answers "$together" "$pp2" 2>&1 | tail -1)" $?
stop_server
status=$?
[ "$status" -ne 124 ] && grep -qF "server stopped" "$work/serve2.log"
check "SIGTERM to mpirun stops both stages (status $status): $(tail -3 "$work/serve2.log")" $?

# The cache bound: a request needing more blocks than the pool holds is refused, smaller ones run.
start_server "$work/serve3.log" "$tessera" serve --load "$work/small" --port 0 \
  --inference-dynamic-batching-block-size 8 --inference-dynamic-batching-buffer-size-gb 0.0001
rc=$?
check "the small-cache server starts: $(cat "$work/serve3.log")" $rc
big=$(curl -s -w ' %{http_code}' -X PUT -H 'Content-Type: application/json' \
  -d '{"prompts": ["1", "2", "3", "4"], "tokens_to_generate": 60}' "http://127.0.0.1:$port/api")
[[ "$big" == *" 400" ]] && grep -qF -- "--inference-dynamic-batching-buffer-size-gb" <<<"$big"
check "a request larger than the cache gets 400 naming the flag: $big" $?
small=$(curl -s -w ' %{http_code}' -X PUT -H 'Content-Type: application/json' \
  -d '{"prompts": ["1"], "tokens_to_generate": 20}' "http://127.0.0.1:$port/api")
[[ "$small" == *" 200" ]]
check "a request that fits is answered: $small" $?
stop_server

# The waiting bound: one sequence runs at a time, one more may wait; the rest are told to retry.
"$tessera" train "${common[@]}" --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 32 \
  --position-embedding-type rope --train-iters 1 --save "$work/slow" >"$work/train2.log" 2>&1
rc=$?
check "training the slower model exits 0: $(tail -3 "$work/train2.log")" $rc
start_server "$work/serve4.log" "$tessera" serve --load "$work/slow" --port 0 --inference-max-requests 1 \
  --inference-max-waiting-sequences 1
rc=$?
check "the one-at-a-time server starts: $(cat "$work/serve4.log")" $rc
python3 -c 'import json; json.dump([{"prompts": ["3 4"], "tokens_to_generate": 500, "top_k": 1}] * 8, open("'"$work"'/burst.json", "w"))'
burst=$(python3 "$here/serve_concurrent.py" "$port" "$work/burst.json")
python3 - "$burst" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
ok = [x for x in r if x[0] == 200]
full = [x for x in r if x[0] == 503]
assert len(ok) + len(full) == 8 and len(ok) >= 1 and len(full) >= 1, [x[0] for x in r]
assert all("the server is full" in x[1]["error"] and "--inference-max-waiting-sequences" in x[1]["error"]
           for x in full), full[0]
assert all(x[1]["tokens"] == ok[0][1]["tokens"] for x in ok)
PY
check "a burst beyond the bound gets 503 'the server is full', the others 200: ${burst:0:400}" $?
stop_server

# Bad batching flags are refused before the server starts, naming the flag.
expect_failure "--inference-max-requests" "$tessera" serve --load "$work/small" --inference-max-requests 0
expect_failure "--inference-dynamic-batching-buffer-size-gb" "$tessera" serve --load "$work/small" \
  --inference-dynamic-batching-buffer-size-gb 1e-9

finish serve_batching_cli
