"""Checks of a running `tessera serve`'s /v1/chat/completions and of streaming (used by tests/serve_chat_cli.sh):
chat's greedy reply is /v1/completions' greedy text on the templated prompt; streamed chunks add up to the
whole response (greedy and seeded), the first chat chunk carries the role, [DONE] comes last, include_usage
adds the usage chunk; bad requests get OpenAI's error objects and the server goes on; a client that leaves
mid-stream frees its cache blocks (a request needing all of them is then served at once).
Python's standard library only.
Usage: serve_chat_client.py URL TEMPLATE POOL_BLOCKS BLOCK_SIZE [--no-disconnect]
  TEMPLATE: plain or chatml (the server's --chat-template), which the expected prompt text is built with;
  --no-disconnect leaves out the client that leaves (checked once, with the first template)."""
import json
import sys
import time
import urllib.error
import urllib.request

base, template = sys.argv[1], sys.argv[2]
pool_blocks, block_size = int(sys.argv[3]), int(sys.argv[4])
disconnect = "--no-disconnect" not in sys.argv[5:]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def request(path, body=None, raw=None, method="POST"):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    return urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})


def call(path, body=None, raw=None, method="POST"):
    try:
        with urllib.request.urlopen(request(path, body, raw, method), timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def stream(path, body):
    """The data of each server-sent event, and the response's content type."""
    with urllib.request.urlopen(request(path, body), timeout=60) as r:
        kind, text = r.headers.get("Content-Type", ""), r.read().decode()
    events = [e for e in text.split("\n\n") if e]
    check(all(e.startswith("data: ") for e in events) and text.endswith("\n\n"), f"every event is 'data: ...': {text!r}")
    return [e[len("data: "):] for e in events], kind


def rendered(messages):
    """The prompt text the server's template makes of `messages`."""
    if template == "plain":
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


end_of_turn = "\nuser:" if template == "plain" else "<|im_end|>"
messages = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "The jury said"}]

# 1. Chat's greedy reply is /v1/completions' greedy text on the templated conversation (stopping where
#    the template's turn ends), with the same usage.
status, chat = call("/v1/chat/completions", {"model": "tiny", "messages": messages, "max_tokens": 12, "temperature": 0})
check(status == 200, f"chat -> 200: {status} {chat}")
status, completion = call("/v1/completions", {"prompt": rendered(messages), "max_tokens": 12, "temperature": 0,
                                              "stop": [end_of_turn]})
check(status == 200, f"completions on the templated text -> 200: {status} {completion}")
if "choices" in chat and "choices" in completion:
    reply, text = chat["choices"][0], completion["choices"][0]
    check(reply["message"] == {"role": "assistant", "content": text["text"]},
          f"chat's reply {reply['message']!r} is the completion of the templated text {text['text']!r}")
    check(reply["finish_reason"] == text["finish_reason"], f"finish_reason {reply} vs {text}")
    check(chat["usage"] == completion["usage"], f"usage {chat['usage']} vs {completion['usage']}")
    check(chat["object"] == "chat.completion" and chat["id"].startswith("chatcmpl-") and chat["model"] == "tiny"
          and reply["logprobs"] is None, f"response envelope: {chat}")
    # The content as a list of text parts is the same conversation.
    parts = [{"role": m["role"], "content": [{"type": "text", "text": m["content"][:5]},
                                             {"type": "text", "text": m["content"][5:]}]} for m in messages]
    status, again = call("/v1/chat/completions", {"messages": parts, "max_completion_tokens": 12, "temperature": 0})
    check(status == 200 and again["choices"][0]["message"] == reply["message"], f"text parts: {status} {again}")

# 2. Log-probs of the reply's tokens: a greedy token is its position's most likely.
status, out = call("/v1/chat/completions", {"messages": messages, "max_tokens": 4, "temperature": 0, "logprobs": True,
                                            "top_logprobs": 3})
check(status == 200, f"chat with logprobs -> 200: {status} {out}")
if status == 200:
    content = out["choices"][0]["logprobs"]["content"]
    check(0 < len(content) <= out["usage"]["completion_tokens"], f"one entry per reply token: {content}")
    check(all(len(c["top_logprobs"]) == 3 and c["top_logprobs"][0]["logprob"] == c["logprob"] for c in content),
          f"three top_logprobs, the greedy token's first: {content}")
    check(all(bytes(c["bytes"]) == c["token"].encode() for c in content if "\ufffd" not in c["token"]),
          f"bytes are the token's UTF-8: {content}")

# 3. Streams add up to the whole response: chat greedy with usage, completions sampled with a seed.
body = {"messages": messages, "max_tokens": 12, "temperature": 0}
events, kind = stream("/v1/chat/completions", dict(body, stream=True, stream_options={"include_usage": True}))
check(kind.startswith("text/event-stream"), f"content type {kind}")
check(events and events[-1] == "[DONE]", f"[DONE] is the last event: {events[-3:]}")
chunks = [json.loads(e) for e in events[:-1]]
if chunks and "choices" in chat:
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant" and chunks[0]["object"] == "chat.completion.chunk",
          f"the first chunk carries the role: {chunks[0]}")
    streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    check(streamed == chat["choices"][0]["message"]["content"],
          f"streamed {streamed!r} vs whole {chat['choices'][0]['message']['content']!r}")
    check(len(chunks) >= 3, f"the reply comes in pieces: {len(chunks)} chunks")
    reasons = [c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"][0]["finish_reason"]]
    check(reasons == [chat["choices"][0]["finish_reason"]], f"one finish_reason, the whole response's: {reasons}")
    check(chunks[-1]["choices"] == [] and chunks[-1]["usage"] == chat["usage"], f"usage chunk: {chunks[-1]}")
    check(all(c["id"] == chunks[0]["id"] and c["id"].startswith("chatcmpl-") for c in chunks), "one id in every chunk")

sampled = {"prompt": "The jury said", "max_tokens": 16, "temperature": 0.9, "top_k": 40, "seed": 7}
status, whole = call("/v1/completions", sampled)
events, _ = stream("/v1/completions", dict(sampled, stream=True))
check(events and events[-1] == "[DONE]", f"[DONE] last: {events[-3:]}")
chunks = [json.loads(e) for e in events[:-1]]
if status == 200 and chunks:
    streamed = "".join(c["choices"][0]["text"] for c in chunks)
    check(streamed == whole["choices"][0]["text"], f"streamed {streamed!r} vs whole {whole['choices'][0]['text']!r}")
    check(all(c["object"] == "text_completion" and "usage" not in c for c in chunks), f"chunks without usage: {chunks}")
    check(chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"], "finish_reason")

# Seeded chat sampling repeats; n choices are sampled apart.
body = {"messages": messages, "max_tokens": 8, "temperature": 1.0, "seed": 11, "n": 2}
status, one = call("/v1/chat/completions", body)
status2, two = call("/v1/chat/completions", body)
check(status == status2 == 200 and one["choices"] == two["choices"] and len(one["choices"]) == 2
      and [c["index"] for c in one["choices"]] == [0, 1], f"seeded n=2: {one} vs {two}")

# 4. Bad requests: OpenAI's error object naming the field; the server goes on.
bad = [({"messages": [{"role": "robot", "content": "x"}]}, "messages"),
       ({"messages": [{"role": "user"}]}, "messages"),
       ({"messages": [{"role": "user", "content": 7}]}, "messages"),
       ({"messages": "hello"}, "messages"),
       ({}, "messages"),
       ({"messages": messages, "tools": [{"type": "function"}]}, "tools"),
       ({"messages": messages, "temperature": "hot"}, "temperature"),
       ({"messages": messages, "top_logprobs": 2}, "top_logprobs"),
       ({"messages": messages, "stream": True, "logprobs": True}, "stream"),
       ({"messages": messages, "max_tokens": 100000}, "max_tokens"),
       ({"messages": messages, "frobnicate": 1}, "frobnicate"),
       ({"messages": [{"role": "user", "content": "word " * 100}]}, "messages")]  # > --max-prompt-tokens
for body, param in bad:
    status, out = call("/v1/chat/completions", body)
    err = out.get("error", {})
    check(status == 400 and isinstance(err, dict) and err.get("param") == param and
          err.get("type") == "invalid_request_error" and err.get("message"), f"{body} -> 400 naming {param}: {out}")
status, out = call("/v1/chat/completions", raw=b'{"messages": [')
check(status == 400 and isinstance(out.get("error"), dict), f"malformed JSON -> error object: {out}")
status, out = call("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}})
check(status == 400 and out["error"]["param"] == "stream_options", f"stream_options without stream: {out}")
status, out = call("/health", method="GET")
check(status == 200, f"still healthy after errors: {status} {out}")

# 5. A client that leaves mid-stream: its sequence is dropped and its blocks freed before the next step,
#    so a request needing every block of the pool is served straight after (the server logs the drop).
if failures:
    sys.exit(1)
if not disconnect:
    print("serve_chat_client: all checks passed (no disconnect asked for)")
    sys.exit(0)
prompt_tokens = len(call("/tokenize", {"prompt": "The jury said"})[1]["tokens"])
fill = pool_blocks * block_size - prompt_tokens  # this prompt and these tokens take every cache block
leaving = {"prompt": "The jury said", "max_tokens": fill, "temperature": 0.9, "seed": 5, "stream": True}
r = urllib.request.urlopen(request("/v1/completions", leaving), timeout=60)
first = r.read1(64)
check(first.startswith(b"data: "), f"the stream starts: {first!r}")
r.close()  # leaves with most of the tokens still to come
started = time.time()
status, out = call("/v1/completions", {"prompt": "The jury said", "max_tokens": fill, "temperature": 0, "seed": 5})
check(status == 200 and out["usage"]["completion_tokens"] >= 1, f"a request taking every block after the client left: {status} {out}")
status, out = call("/v1/completions", {"prompt": "The jury said", "max_tokens": fill + 1, "temperature": 0})
check(status == 400 and "key/value cache blocks" in out["error"]["message"], f"one more token needs a block more: {out}")
print(f"request after the disconnect answered in {time.time() - started:.2f} s")

if failures:
    sys.exit(1)
print("serve_chat_client: all checks passed")
