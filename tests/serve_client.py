"""Checks of a running `tessera serve` (used by tests/serve_cli.sh): every field of PUT /api, POST
/completions, GET /health, malformed JSON, wrong types, oversize bodies, concurrent requests and a
client that disconnects. Prints one line per failure; exits 1 if any."""
import json
import socket
import sys
import threading
import urllib.error
import urllib.request

base = sys.argv[1]  # http://127.0.0.1:PORT
max_body = int(sys.argv[2])
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def call(method, path, body=None, raw=None, timeout=60):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, {"unparsed": text.decode(errors="replace")}


def api(body, **kw):
    return call("PUT", "/api", body, **kw)


status, out = call("GET", "/health")
check(status == 200 and out == {"status": "ok"}, f"health: {status} {out}")

# Every field of PUT /api.
status, out = api({"prompts": ["3 5 7", "11"], "tokens_to_generate": 6, "top_k": 1})
check(status == 200, f"basic request: {status} {out}")
check(set(out) == {"text", "segments", "logprobs", "tokens"}, f"response fields: {sorted(out)}")
check(len(out["text"]) == 2 and out["text"][0].startswith("3 5 7"), f"text is prompt + generation: {out['text']}")
check(out["tokens"][0][:3] == [3, 5, 7] and len(out["tokens"][0]) == 9, f"tokens: {out['tokens']}")
check(len(out["segments"][0]) == len(out["tokens"][0]), f"one segment per token: {out['segments']}")
check(out["logprobs"] is None, "logprobs is null unless asked for")
greedy = out
status, out = api({"prompts": ["3 5 7"], "tokens_to_generate": 6, "top_k": 1, "logprobs": True})
check(status == 200 and len(out["logprobs"][0]) == len(out["tokens"][0]) - 1, f"logprobs per token: {out}")
check(all(lp <= 0 for lp in out["logprobs"][0]), "log-probabilities are <= 0")
check(out["tokens"][0] == greedy["tokens"][0], "the same greedy request gives the same tokens")
status, out = api({"prompts": ["3 5 7"], "tokens_to_generate": 0, "logprobs": True})
check(status == 200 and out["tokens"] == [[3, 5, 7]] and len(out["logprobs"][0]) == 2, f"scoring only: {out}")
a = api({"prompts": ["1 2"], "tokens_to_generate": 10, "temperature": 0.9, "top_p": 0.9, "random_seed": 4})
b = api({"prompts": ["1 2"], "tokens_to_generate": 10, "temperature": 0.9, "top_p": 0.9, "random_seed": 4})
check(a[0] == 200 and a == b, f"random_seed reproduces: {a} {b}")
status, out = api({"prompts": ["1 2"], "tokens_to_generate": 3, "top_k": 1, "add_BOS": True})
check(status == 200 and out["tokens"][0][0] == 60, f"add_BOS puts eod (60) first: {out}")
status, out = api({"prompts": [""], "tokens_to_generate": 3, "top_k": 1, "add_BOS": True})
check(status == 200 and out["tokens"][0][0] == 60 and len(out["tokens"][0]) == 4, f"empty prompt with add_BOS: {out}")
for flag in ("stop_on_eol", "stop_on_double_eol", "no_log"):
    status, out = api({"prompts": ["1 2"], "tokens_to_generate": 3, "top_k": 1, flag: True})
    check(status == 200 and out["tokens"] == api({"prompts": ["1 2"], "tokens_to_generate": 3, "top_k": 1})[1]["tokens"],
          f"{flag} (no newline tokens in this vocabulary): {status} {out}")
status, out = api({"prompts": ["1 2"], "tokens_to_generate": 3, "temperature": 100.0})
check(status == 200, f"temperature 100: {status} {out}")

# Validation errors: HTTP 400 with a JSON message.
bad = [
    ({}, "prompts argument required"),
    ({"prompts": "1 2"}, "prompts is not a list of strings"),
    ({"prompts": [1, 2]}, "prompts is not a list of strings"),
    ({"prompts": []}, "prompts is empty"),
    ({"prompts": ["1"] * 5}, "Maximum number of prompts is 4"),
    ({"prompts": ["1"], "tokens_to_generate": "5"}, "tokens_to_generate must be an integer"),
    ({"prompts": ["1"], "tokens_to_generate": -1}, "greater than or equal to 0"),
    ({"prompts": ["1"], "tokens_to_generate": 41}, "at most 40"),
    ({"prompts": ["1"], "tokens_to_generate": 0}, "tokens_to_generate=0 implies logprobs should be True"),
    ({"prompts": ["1"], "logprobs": "yes"}, "logprobs must be a boolean value"),
    ({"prompts": ["1"], "temperature": 0}, "temperature must be a positive number"),
    ({"prompts": ["1"], "temperature": "hot"}, "temperature must be a positive number"),
    ({"prompts": ["1"], "top_k": 2.5}, "top_k must be an integer"),
    ({"prompts": ["1"], "top_k": -1}, "top_k must be equal to or greater than 0"),
    ({"prompts": ["1"], "top_p": "x"}, "top_p must be a positive float"),
    ({"prompts": ["1"], "top_p": 1.5}, "top_p must be less than or equal to 1.0"),
    ({"prompts": ["1"], "top_k": 2, "top_p": 0.5}, "cannot set both top-k and top-p samplings."),
    ({"prompts": ["1"], "add_BOS": 1}, "add_BOS must be a boolean value"),
    ({"prompts": [""]}, "Empty prompts require add_BOS=true"),
    ({"prompts": ["1"], "stop_on_eol": "no"}, "stop_on_eol must be a boolean value"),
    ({"prompts": ["1"], "stop_on_double_eol": 0}, "stop_on_double_eol must be a boolean value"),
    ({"prompts": ["1"], "random_seed": -3}, "random_seed must be a positive integer"),
    ({"prompts": ["1"], "random_seed": "a"}, "random_seed must be integer"),
    ({"prompts": ["1"], "max_len": 4}, "max_len is no longer used"),
    ({"prompts": ["1"], "beam_width": 2}, "beam_width is not supported"),
    ({"prompts": ["1"], "tokens": 2}, "unknown field 'tokens'"),
    ({"prompts": ["1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30"], "tokens_to_generate": 40},
     "Too many tokens"),
    ({"prompts": ["1 99"]}, "prompt cannot be tokenized"),
]
for body, message in bad:
    status, out = api(body)
    check(status == 400 and message in out.get("error", ""), f"{body} -> 400 '{message}', got {status} {out}")
status, out = api(None, raw=b'{"prompts": ["1"')
check(status == 400 and "malformed JSON" in out.get("error", ""), f"malformed JSON -> 400: {status} {out}")
status, out = api(None, raw=b'[1, 2]')
check(status == 400 and "JSON object" in out.get("error", ""), f"a JSON array -> 400: {status} {out}")
status, out = api(None, raw=json.dumps({"prompts": ["1 " * (max_body // 2)]}).encode())
check(status == 413 and "--max-body-bytes" in out.get("error", ""), f"oversize body -> 413: {status} {out}")
status, out = call("GET", "/nowhere")
check(status == 404 and "error" in out, f"unknown path -> 404 JSON: {status} {out}")
status, out = call("POST", "/api", {"prompts": ["1"]})
check(status in (404, 405), f"POST /api is not the API: {status}")

# /completions in its OpenAI-like form.
status, out = call("POST", "/completions", {"prompt": "3 5 7", "max_tokens": 4, "temperature": 0})
check(status == 200 and len(out["choices"]) == 1 and out["choices"][0]["index"] == 0, f"completions: {status} {out}")
c = out["choices"][0]
check(greedy["text"][0].startswith("3 5 7" + c["text"]), f"completion continues the prompt: {c} vs {greedy['text'][0]}")
check(len(c["logprobs"]["tokens"]) == 4 and len(c["logprobs"]["token_logprobs"]) == 4, f"completion logprobs: {c}")
status, out = call("POST", "/completions", {"prompt": [[3, 5, 7]], "max_tokens": 4, "temperature": 0, "echo": True})
check(status == 200 and out["choices"][0]["text"].startswith("3 5 7"), f"echo with token ids: {status} {out}")
stop_at = c["text"].split()[1]
status, out = call("POST", "/completions", {"prompt": "3 5 7", "max_tokens": 4, "temperature": 0, "stop": " " + stop_at})
check(status == 200 and out["choices"][0]["text"] == c["text"][: c["text"].index(" " + stop_at)], f"stop: {out}")
for body in ({"prompt": "1"}, {"max_tokens": 2}, {"prompt": "1", "max_tokens": 2, "n": 2},
             {"prompt": "1", "max_tokens": 2, "logprobs": 2}, {"prompt": {"a": 1}, "max_tokens": 2}):
    status, out = call("POST", "/completions", body)
    check(status == 400 and "error" in out, f"completions {body} -> 400: {status} {out}")

# Concurrent clients: all answered, each as when alone.
results = [None] * 12


def worker(i):
    results[i] = api({"prompts": [f"{i % 5 + 1} {i % 5 + 3}"], "tokens_to_generate": 8, "top_k": 1})


threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i, r in enumerate(results):
    alone = api({"prompts": [f"{i % 5 + 1} {i % 5 + 3}"], "tokens_to_generate": 8, "top_k": 1})
    check(r is not None and r[0] == 200 and r == alone, f"concurrent request {i}: {r} vs {alone}")

# Clients that go away: one sends half a request, one leaves before its answer; the server goes on.
host, port = base.split("//")[1].split(":")
s = socket.create_connection((host, int(port)))
s.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompts\"")
s.close()
s = socket.create_connection((host, int(port)))
body = json.dumps({"prompts": ["1 2"], "tokens_to_generate": 30}).encode()
s.sendall(b"PUT /api HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
s.close()
status, out = api({"prompts": ["3 5 7"], "tokens_to_generate": 6, "top_k": 1})
check(status == 200 and out["tokens"] == greedy["tokens"][:1], f"after disconnects: {status} {out}")

print(f"serve_client: {len(failures)} failures")
sys.exit(1 if failures else 0)
