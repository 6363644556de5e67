"""One run of the long-prompt workload against a tessera serve (bench/serve_chunked_prefill.sh).

usage: serve_chunked_prefill.py PORT [--streams N] [--tokens T] [--long L] [--json]

STREAMS clients each stream a POST /v1/completions (an 8-token prompt, T tokens, top_k 20, their own seed)
and time every chunk as it arrives. Once each has had 8 tokens, another client sends a LONG-token prompt
(max_tokens 1, not streamed). Prints the streams' inter-token times before the long prompt arrived
(median), and while it was being prefilled (from its sending to its answer: median and the longest gap,
which without chunked prefill is the whole prefill), and the long request's latency (its time to the
first token). Token ids as prompts: the checkpoint's NullTokenizer reads numbers.
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request

p = argparse.ArgumentParser()
p.add_argument("port")
p.add_argument("--streams", type=int, default=4)
p.add_argument("--tokens", type=int, default=160)
p.add_argument("--long", type=int, default=1536)
p.add_argument("--vocab", type=int, default=50257)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--json", action="store_true")
a = p.parse_args()
base = f"http://127.0.0.1:{a.port}"


def ids(n, salt):
    return [(1103515245 * (salt * 7919 + i) + 12345 + a.seed) % (a.vocab - 1) for i in range(n)]


def request(body):
    return urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                  headers={"Content-Type": "application/json"})


arrivals = [[] for _ in range(a.streams)]  # each stream's chunk times
started = threading.Barrier(a.streams + 1)


def stream(k):
    body = {"prompt": ids(8, k), "max_tokens": a.tokens, "top_k": 20, "seed": 1000 * a.seed + k, "stream": True}
    with urllib.request.urlopen(request(body), timeout=600) as r:
        for line in r:
            data = line.decode().removeprefix("data: ").strip()
            if not data or data == "[DONE]":
                continue
            chunk = json.loads(data)
            if chunk["choices"] and chunk["choices"][0]["text"]:
                arrivals[k].append(time.perf_counter())


threads = [threading.Thread(target=stream, args=(k,)) for k in range(a.streams)]
for t in threads:
    t.start()
while min(len(x) for x in arrivals) < 8 and all(t.is_alive() for t in threads):
    time.sleep(0.001)
sent = time.perf_counter()
with urllib.request.urlopen(request({"prompt": ids(a.long, 999), "max_tokens": 1, "temperature": 0}), timeout=600) as r:
    assert "choices" in json.loads(r.read())
answered = time.perf_counter()
for t in threads:
    t.join()

before, during = [], []
for times in arrivals:
    for t0, t1 in zip(times, times[1:]):
        if t1 <= sent:
            before.append(t1 - t0)
        elif t0 < answered:  # a gap that overlaps the long prompt's prefill
            during.append(t1 - t0)
ms = lambda s: round(1000 * s, 1)
out = {"streams": a.streams, "tokens": sum(len(x) for x in arrivals), "long": a.long,
       "itl_before_ms": ms(statistics.median(before)), "itl_during_median_ms": ms(statistics.median(during)),
       "itl_during_max_ms": ms(max(during)), "gaps_during": len(during), "long_latency_ms": ms(answered - sent)}
print(json.dumps(out) if a.json else out)
