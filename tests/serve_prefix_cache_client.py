"""Requests that share prefixes, sent one after another to a tessera serve (tests/serve_prefix_cache_cli.sh).

usage: serve_prefix_cache_client.py PORT BLOCK_SIZE OUT.json

Sends multiple-choice style requests (one context, four endings) to /v1/completions with token-id prompts
and top log-probs of the generated tokens, a repeated system prompt with different questions to /api
(without logprobs: Megatron's are the prompt's too), and one request echoing its prompt's log-probs (lm-evaluation-harness's loglikelihood shape), then reads /metrics. Writes the
answers, the prefix-cache counters, and the prompt tokens the cache should have served: each request's
longest run of full blocks already filled by an earlier request (prompt and generated tokens, all but the
last generated one, which is never fed), leaving at least one prompt token to prefill; none for the echo.
"""
import json
import sys
import urllib.request

port, block, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
base = f"http://127.0.0.1:{port}"


def call(method, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


context = [(7 * t + 3) % 57 + 1 for t in range(21)]
system = [(5 * t + 2) % 57 + 1 for t in range(17)]
requests = []
for ending in ([4], [9, 12], [30, 31, 32], [40, 41, 42, 43]):
    requests.append(("v1", context + ending))
for question in ([50, 51], [52], [53, 54, 55, 56, 1, 2, 3, 4, 5]):
    requests.append(("api", system + question))
requests.append(("v1", context[:16]))  # two whole blocks: the second is prefilled again
requests.append(("echo", context + [4]))

answers, expected, filled = [], 0, set()
for kind, prompt in requests:
    if kind == "v1":
        r = call("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 5, "temperature": 0, "logprobs": 3})
        c = r["choices"][0]
        answers.append({"text": c["text"], "logprobs": c["logprobs"]})
        # The generated ids: NullTokenizer's text of an id is the id (60, end of document, is not a number).
        ids = prompt + [int(t) if t.strip().isdigit() else 60 for t in c["logprobs"]["tokens"]]
    elif kind == "api":
        r = call("PUT", "/api", {"prompts": [" ".join(map(str, prompt))], "tokens_to_generate": 6, "top_k": 1})
        answers.append({"tokens": r["tokens"], "logprobs": r["logprobs"]})
        ids = r["tokens"][0]
    else:
        r = call("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 1,
                                             "echo": True})
        answers.append({"logprobs": r["choices"][0]["logprobs"]})
        ids = prompt + [0]
    if kind != "echo":
        hits = 0
        while (hits + 1) * block <= len(prompt) - 1 and tuple(prompt[:(hits + 1) * block]) in filled:
            hits += 1
        expected += hits * block
    fed = ids[:-1]
    for b in range(1, len(fed) // block + 1):
        filled.add(tuple(fed[:b * block]))

with urllib.request.urlopen(base + "/metrics", timeout=60) as resp:
    metrics = {}
    for line in resp.read().decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.split()
            metrics[name] = int(value)
json.dump({"answers": answers, "metrics": metrics, "expected_hits": expected}, open(out_path, "w"))
