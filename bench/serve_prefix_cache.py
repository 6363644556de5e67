"""One run of a shared-prefix workload against a tessera serve (bench/serve_prefix_cache.sh).

usage: serve_prefix_cache.py PORT --workload mc|system --clients N --items N --context N [--json]

mc (multiple choice): ITEMS questions, each a CONTEXT-token context and 4 endings of 4-7 tokens; each
ending is one POST /v1/completions with token ids, max_tokens 1 and logprobs 5 (the log-probs of the
next token, as a harness scoring an answer letter reads them); a client sends a question's endings one
after another, CLIENTS clients at once. system: ITEMS questions of 8-23 tokens after one CONTEXT-token
system prompt, each generating 16 tokens greedily, CLIENTS clients sending theirs one after another. Prints the wall time,
requests/s, the prompt tokens sent, and the server's /metrics prefix-cache counters (before/after
difference).
"""
import argparse
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

p = argparse.ArgumentParser()
p.add_argument("port")
p.add_argument("--workload", choices=["mc", "system"], default="mc")
p.add_argument("--clients", type=int, default=4)
p.add_argument("--items", type=int, default=8)
p.add_argument("--context", type=int, default=384)
p.add_argument("--vocab", type=int, default=50257)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--json", action="store_true")
a = p.parse_args()
base = f"http://127.0.0.1:{a.port}"


def ids(n, salt):  # deterministic, distinct per salt
    return [(1103515245 * (salt * 7919 + i) + 12345 + a.seed) % (a.vocab - 1) for i in range(n)]


def post(body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        r = json.loads(resp.read())
    assert "choices" in r, r
    return r


def metrics():
    with urllib.request.urlopen(base + "/metrics", timeout=60) as resp:
        out = {}
        for line in resp.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.split()
                out[k] = int(v)
        return out


chains = []  # each is sent one request after another; CLIENTS chains at once
if a.workload == "mc":
    for q in range(a.items):
        context = ids(a.context, 1000 + q)
        chains.append([{"prompt": context + ids(4 + e, 50 * q + e), "max_tokens": 1, "temperature": 0, "logprobs": 5}
                       for e in range(4)])
else:
    system = ids(a.context, 7)
    questions = [{"prompt": system + ids(8 + (5 * i) % 16, 3000 + i), "max_tokens": 16, "temperature": 0}
                 for i in range(a.items)]
    chains = [questions[c::a.clients] for c in range(a.clients)]

post({"prompt": ids(8, 99999), "max_tokens": 1})  # warm-up, not counted (shares no prefix)
before = metrics()
start = time.time()
with ThreadPoolExecutor(max_workers=a.clients) as pool:
    list(pool.map(lambda chain: [post(b) for b in chain], chains))
seconds = time.time() - start
after = metrics()
requests = sum(len(c) for c in chains)
prompt_tokens = sum(len(b["prompt"]) for c in chains for b in c)
hits = after["tessera:prefix_cache_hits_total"] - before["tessera:prefix_cache_hits_total"]
queries = after["tessera:prefix_cache_queries_total"] - before["tessera:prefix_cache_queries_total"]
result = {"workload": a.workload, "requests": requests, "seconds": seconds, "requests_per_s": requests / seconds,
          "prompt_tokens": prompt_tokens, "cache_hits": hits, "cache_queries": queries}
print(json.dumps(result) if a.json else result)
