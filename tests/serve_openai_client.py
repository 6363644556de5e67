"""Checks of a running `tessera serve`'s OpenAI and tokenizer endpoints (used by tests/serve_openai_cli.sh):
a loglikelihood request exactly as lm-evaluation-harness's local-completions sends it, compared with the
log-softmax of `tessera debug-forward`'s logits on the same tokens; /tokenize, /detokenize,
/tokenizer_info, /v1/models; OpenAI's error objects. Python's standard library only.
Usage: serve_openai_client.py URL LOGITS.safetensors CONTEXT_IDS CONTINUATION_IDS (ids comma-separated).
Prints one line per failure; exits 1 if any."""
import json
import math
import struct
import sys
import urllib.error
import urllib.request

base, logits_file = sys.argv[1], sys.argv[2]
context = [int(x) for x in sys.argv[3].split(",")]
continuation = [int(x) for x in sys.argv[4].split(",")]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def call(method, path, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def read_logits(path):
    """The "logits" tensor of a safetensors file (F32) as rows over the last axis."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    t = header["logits"]
    assert t["dtype"] == "F32", t
    begin, end = t["data_offsets"]
    values = struct.unpack(f"<{(end - begin) // 4}f", data[begin:end])
    width = t["shape"][-1]
    return [values[i:i + width] for i in range(0, len(values), width)]


def log_softmax_at(row, i):
    top = max(row)
    return row[i] - top - math.log(sum(math.exp(x - top) for x in row))


# The reference: position p's logits predict token p + 1 of context + continuation.
tokens = context + continuation
rows = read_logits(logits_file)
check(len(rows) == len(tokens) - 1, f"debug-forward gives {len(rows)} rows for {len(tokens)} tokens")
status, info = call("GET", "/tokenizer_info")
vocab = info.get("vocab_size", 0)
expected = [log_softmax_at(rows[p - 1], tokens[p]) for p in range(len(context), len(tokens))]
# Greedy as lm-eval decides it: each continuation token is the most likely real token (not padding).
expected_greedy = all(max(range(vocab), key=lambda i: rows[p - 1][i]) == tokens[p]
                      for p in range(len(context), len(tokens)))

# 1. lm-evaluation-harness local-completions' loglikelihood payload (api_models.py / openai_completions.py):
#    token ids, temperature 0, max_tokens 1, logprobs 1, seed, echo; it reads token_logprobs[ctxlen:-1].
for max_tokens in (1, 0):
    payload = {"model": "tiny", "prompt": [tokens], "temperature": 0, "max_tokens": max_tokens, "logprobs": 1,
               "seed": 1234, "echo": True}
    status, out = call("POST", "/v1/completions", payload)
    check(status == 200, f"loglikelihood request (max_tokens {max_tokens}) -> 200: {status} {out}")
    if status != 200:
        continue
    choice = sorted(out["choices"], key=lambda c: c["index"])[0]
    lp = choice["logprobs"]
    end = -1 if max_tokens == 1 else None  # lm-eval drops the generated token
    token_logprobs = lp["token_logprobs"][len(context):end]
    top_logprobs = lp["top_logprobs"][len(context):end]
    check(len(lp["token_logprobs"]) == len(tokens) + max_tokens and lp["token_logprobs"][0] is None,
          f"echo gives every prompt token, the first null: {lp['token_logprobs']}")
    for got, want in zip(token_logprobs, expected):
        check(abs(got - want) <= 1e-4, f"continuation token log-prob {got} vs debug-forward's {want}")
    check(abs(sum(token_logprobs) - sum(expected)) <= 1e-4,
          f"summed continuation log-prob {sum(token_logprobs)} vs debug-forward's {sum(expected)}")
    is_greedy = all(tok == max(top.values()) for tok, top in zip(token_logprobs, top_logprobs))
    check(is_greedy == expected_greedy, f"is_greedy from top_logprobs {is_greedy} vs the logits' {expected_greedy}")
    check(all(len(t) == 1 for t in top_logprobs), f"logprobs 1: one entry per top_logprobs dict: {top_logprobs}")
    check(out["object"] == "text_completion" and out["model"] == "tiny" and out["id"].startswith("cmpl-")
          and isinstance(out["created"], int), f"response envelope: {out}")
    check(out["usage"] == {"prompt_tokens": len(tokens), "completion_tokens": max_tokens,
                           "total_tokens": len(tokens) + max_tokens}, f"usage: {out['usage']}")
    check(choice["finish_reason"] in ("length", "stop"), f"finish_reason: {choice}")

# A greedy continuation: the top-1 entry of each generated position is the token generated.
status, out = call("POST", "/v1/completions", {"prompt": [context], "max_tokens": 4, "temperature": 0, "logprobs": 2})
check(status == 200, f"greedy generation: {status} {out}")
if status == 200:
    lp = out["choices"][0]["logprobs"]
    check(all(max(top.values()) == t for t, top in zip(lp["token_logprobs"], lp["top_logprobs"])),
          f"greedy tokens are each position's most likely: {lp}")
    check(all(len(top) == 2 for top in lp["top_logprobs"]), f"logprobs 2: two entries: {lp['top_logprobs']}")

# 2. The tokenizer endpoints, as lm-eval's remote tokenizer calls them.
check(status == 200 and "eos_token" in info and info["eos_token_id"] < vocab, f"tokenizer_info: {info}")
text = " ".join(map(str, context))
status, out = call("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
check(status == 200 and out["tokens"] == context and out["count"] == len(context), f"/tokenize: {status} {out}")
status, out = call("POST", "/tokenize", {"prompt": info["eos_token"], "add_special_tokens": False})
check(status == 200 and out["tokens"][0] == info["eos_token_id"], f"eos_token tokenizes to eos_token_id: {out}")
status, out = call("POST", "/detokenize", {"tokens": context})
check(status == 200 and out["prompt"] == text, f"/detokenize: {status} {out}")
status, out = call("GET", "/v1/models")
check(status == 200 and out["data"][0]["id"] == "tiny" and out["data"][0]["object"] == "model", f"/v1/models: {out}")

# 3. Errors: OpenAI's object on /v1/ routes, with the field as param; the server goes on.
for body, param in (({"prompt": "1", "logprobs": 99}, "logprobs"), ({"prompt": "1", "n": 2}, "n"),
                    ({"prompt": [[1, 9999]]}, "prompt"), ({"prompt": "1", "max_tokens": -1}, "max_tokens")):
    status, out = call("POST", "/v1/completions", body)
    err = out.get("error", {})
    check(status == 400 and isinstance(err, dict) and err.get("param") == param
          and err.get("type") == "invalid_request_error" and err.get("message"), f"{body} -> 400 naming {param}: {out}")
status, out = call("POST", "/v1/completions", raw=b"{not json")
check(status == 400 and isinstance(out.get("error"), dict), f"malformed JSON -> OpenAI error object: {out}")
status, out = call("GET", "/v1/nothing")
check(status == 404 and isinstance(out.get("error"), dict), f"unknown /v1 route -> 404 error object: {out}")
status, out = call("POST", "/tokenize", {"prompt": 5})
check(status == 400 and out.get("error") == "prompt must be a string (the text to tokenize)", f"/tokenize bad: {out}")
status, out = call("POST", "/v1/completions", {"prompt": text, "max_tokens": 2, "temperature": 0})
check(status == 200 and out["choices"][0]["logprobs"] is None, f"still serving after errors: {status} {out}")

if failures:
    sys.exit(1)
print("serve_openai_client: all checks passed")
