"""Load test of a running `tessera serve` (loopback only, bounded): C concurrent clients each send R
PUT /api requests; prints requests/s, p50/p90/p99 latency and generated tokens/s (with --json, also as one
JSON line), and fails if any request failed.

usage: serve_load.py PORT [--clients C] [--requests R] [--tokens T] [--prompt TEXT] [--json]"""
import argparse
import json
import statistics
import sys
import threading
import time
import urllib.request

p = argparse.ArgumentParser()
p.add_argument("port", type=int)
p.add_argument("--clients", type=int, default=4)
p.add_argument("--requests", type=int, default=10, help="per client")
p.add_argument("--tokens", type=int, default=16, help="tokens_to_generate per request")
p.add_argument("--prompt", default="The jury said")
p.add_argument("--timeout", type=float, default=600)
p.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
a = p.parse_args()
assert 1 <= a.clients <= 64 and 1 <= a.requests <= 1000, "bounded: at most 64 clients x 1000 requests"

url = f"http://127.0.0.1:{a.port}/api"  # loopback only
latencies, failures, tokens = [], [], [0]
lock = threading.Lock()


def put(body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=a.timeout) as resp:
        return resp.status, json.loads(resp.read())


# The prompt's length in tokens, so that only generated tokens are counted.
prompt_tokens = len(put({"prompts": [a.prompt], "tokens_to_generate": 0, "logprobs": True})[1]["tokens"][0])
put({"prompts": [a.prompt], "tokens_to_generate": a.tokens, "top_k": 1})  # warm-up: first touches of the caches


def client(c):
    for r in range(a.requests):
        body = {"prompts": [a.prompt], "tokens_to_generate": a.tokens, "top_k": 20, "random_seed": c * 1000 + r}
        start = time.perf_counter()
        try:
            status, out = put(body)
            ok = status == 200 and len(out["text"]) == 1
        except Exception as e:  # noqa: BLE001 - every failure is counted
            ok, out = False, str(e)
        elapsed = time.perf_counter() - start
        with lock:
            if ok:
                latencies.append(elapsed)
                tokens[0] += len(out["tokens"][0]) - prompt_tokens
            else:
                failures.append(out)


start = time.perf_counter()
threads = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = time.perf_counter() - start
n = len(latencies)
q = statistics.quantiles(latencies, n=100, method="inclusive") if n >= 2 else [latencies[0]] * 99 if n else [0] * 99
print(f"clients {a.clients} x requests {a.requests}, tokens_to_generate {a.tokens}: "
      f"{n} ok, {len(failures)} failed in {wall:.1f} s | {n / wall:.2f} requests/s | "
      f"latency p50 {q[49] * 1000:.0f} ms, p90 {q[89] * 1000:.0f} ms, p99 {q[98] * 1000:.0f} ms | "
      f"{tokens[0] / wall:.1f} generated tokens/s")
if a.json:
    print(json.dumps({"clients": a.clients, "requests": a.requests, "ok": n, "failed": len(failures), "wall_s": wall,
                      "tokens_per_s": tokens[0] / wall, "p50_ms": q[49] * 1000, "p90_ms": q[89] * 1000,
                      "p99_ms": q[98] * 1000}))
for f in failures[:5]:
    print("failure:", f)
sys.exit(1 if failures else 0)
