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
source "$root/bench/lib/servers.sh"
declare -A pids ports
trap 'stop_bench_servers; rm -rf "$work"' EXIT
echo "command: ROUNDS=$rounds CLIENTS=$clients EXTRA=\"${EXTRA:-}\" OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} bench/serve_step_time.sh $requests $tokens"
bench_machine
"$bench" --rounds 10 | sed -n '1,5p'
bench_checkpoint 256
# shellcheck disable=SC2086
start_bench_server serve "$work/ckpt" --http-threads 40 --max-connections-per-client 40 ${EXTRA:-}
port=${ports[serve]}
pid=${pids[serve]}
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
stop_bench_servers
grep -A1 "server stopped" "$work/serve.log" | sed 's/; /;\n   /g'
"$bench" --rounds 10 | sed -n '1,5p'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
