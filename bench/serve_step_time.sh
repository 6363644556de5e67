#!/usr/bin/env bash
# Where the batched server's step goes, against bench_decode_step's step in the same run: one batched
# server (the defaults) on serve_load.sh's checkpoint shape takes ROUNDS rounds of bench/serve_load.py at
# CLIENTS concurrent clients (REQUESTS requests of TOKENS tokens each), then stops; its closing line
# splits each step into the model's forward, the rest of BatchDecoder::step and the rest of the server's
# loop, per step size (steps no request joined). bench_decode_step --rounds 10 runs before and after, at
# the same OMP_NUM_THREADS. The two differ by what the server does beside the model (HTTP threads, the
# clients on the same cores, hand-offs); the gap is the server's overhead.
# usage: [ROUNDS=3] [CLIENTS=8] [EXTRA="serve flags"] bench/serve_step_time.sh [REQUESTS] [TOKENS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tessera=${TESSERA:-$root/build/release/tessera}
bench=${BENCH_DECODE_STEP:-$root/build/release/bench_decode_step}
requests=${1:-4}
tokens=${2:-32}
rounds=${ROUNDS:-3}
clients=${CLIENTS:-8}
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
echo "command: ROUNDS=$rounds CLIENTS=$clients EXTRA=\"${EXTRA:-}\" OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} bench/serve_step_time.sh $requests $tokens"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc --all) CPUs), commit $(git -C "$root" rev-parse --short HEAD), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" --rounds 10 | sed -n '1,5p'
ckpt=$work/ckpt
"$tessera" train --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --num-layers 4 --hidden-size 256 \
  --num-attention-heads 8 --seq-length 128 --max-position-embeddings 256 --micro-batch-size 1 --global-batch-size 1 \
  --train-iters 1 --lr 1e-4 --eval-iters 0 --save "$ckpt" >"$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
# shellcheck disable=SC2086
"$tessera" serve --load "$ckpt" --port 0 --http-threads 40 --max-connections-per-client 40 ${EXTRA:-} >"$work/serve.log" 2>&1 &
pid=$!
port=""
for _ in $(seq 1 600); do
  port=$(grep -o "on http://127.0.0.1:[0-9]*" "$work/serve.log" | grep -o "[0-9]*$" || true)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/serve.log"; exit 1; }
for _ in $(seq 1 "$rounds"); do
  /usr/bin/time -f "client CPU: %U s user, %S s system in %e s" python3 "$root/bench/serve_load.py" "$port" --clients "$clients" --requests "$requests" --tokens "$tokens" \
    --prompt "464 8053 531 3226 4026 286"
done
# CPU seconds of each thread of the server (main: the decoding loop; OpenMP workers; HTTP threads, and
# any OpenMP team an HTTP thread started): who shares the cores with the model.
python3 - "$pid" <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
rows = []
for tid in os.listdir(f"/proc/{sys.argv[1]}/task"):
    fields = open(f"/proc/{sys.argv[1]}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
    rows.append(((int(fields[11]) + int(fields[12])) / tick, int(tid)))
rows.sort(reverse=True)
busy = [f"{tid}: {cpu:.2f} s" for cpu, tid in rows if cpu > 0]
print(f"server threads: {len(rows)}, CPU time of the busy ones: " + ", ".join(busy))
PY
kill -TERM "$pid" && wait "$pid" || true
pid=""
grep -A1 "server stopped" "$work/serve.log" | sed 's/; /;\n   /g'
"$bench" --rounds 10 | sed -n '1,5p'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
