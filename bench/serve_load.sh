#!/usr/bin/env bash
# Starts `tessera serve` on a checkpoint (loopback, any free port), runs bench/serve_load.py against it
# at several client counts, and stops the server. Fails if any request failed.
# usage: bench/serve_load.sh CHECKPOINT [requests per client] [tokens per request]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tessera=${TESSERA:-$root/build/release/tessera}
ckpt=${1:?usage: serve_load.sh CHECKPOINT [requests] [tokens]}
requests=${2:-8}
tokens=${3:-16}
log=$(mktemp)
"$tessera" serve --load "$ckpt" --port 0 --http-threads 16 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 600); do
  port=$(grep -o "on http://127.0.0.1:[0-9]*" "$log" | grep -o "[0-9]*$" || true)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$log"; exit 1; }
for clients in 1 4 16; do
  python3 "$root/bench/serve_load.py" "$port" --clients "$clients" --requests "$requests" --tokens "$tokens"
done
