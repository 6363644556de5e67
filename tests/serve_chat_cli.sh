#!/usr/bin/env bash
# tessera serve's /v1/chat/completions and streaming end to end (tests/serve_chat_client.py) on a tiny
# untrained model of GPT-2's vocabulary read with GPT-2's tokenizer: chat with the plain template equals
# /v1/completions on the templated text, streams add up to the whole response, errors are OpenAI's, a
# client leaving mid-stream frees its cache blocks (logged); then the ChatML template from a
# tokenizer_config.json, and a template tessera cannot render refused at start-up. Loopback only.
set -uo pipefail
tessera=${1:?usage: serve_chat_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TESSERA_DATA_CACHE:-$root/data-cache}
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT
source "$root/tests/lib/checks.sh"
source "$root/tests/lib/server.sh"
[ -f "$cache/gpt2/gpt2-vocab.json" ] || skip "no GPT-2 vocabulary in $cache/gpt2 (scripts/setup.sh fetches it)"
tokenizer=(--tokenizer-type GPT2BPETokenizer --vocab-file "$cache/gpt2/gpt2-vocab.json"
           --merge-file "$cache/gpt2/gpt2-merges.txt")

# GPT-2's 50256 ids (the NullTokenizer adds the end-of-document id), rotary positions: generation may
# run past --seq-length to fill the whole cache pool.
"$tessera" train --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --num-layers 2 --hidden-size 32 \
  --num-attention-heads 4 --seq-length 64 --position-embedding-type rope --micro-batch-size 2 --global-batch-size 2 \
  --train-iters 2 --lr 1e-3 --eval-iters 0 --save "$work/model" >"$work/train.log" 2>&1
rc=$?
check "training the tiny model exits 0: $(tail -3 "$work/train.log")" $rc

# A pool of 8 blocks of 32 positions (2 layers x 4 heads x 8 channels x keys and values x 4 bytes x 32 =
# 16 KiB a block), so that one request can need all of them (and takes long enough to leave mid-way).
pool=(--inference-dynamic-batching-block-size 32 --inference-dynamic-batching-buffer-size-gb 0.0001225)
start_server "$work/serve.log" "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 --served-model-name tiny \
  --chat-template plain --max-logprobs 5 "${pool[@]}"
rc=$?
check "the server starts and prints its port: $(cat "$work/serve.log")" $rc
grep -q "8 key/value blocks of 32 positions.*chat template plain" "$work/serve.log"
rc=$?
check "the start-up line gives the pool and the chat template: $(head -3 "$work/serve.log")" $rc
timeout 120 python3 "$root/tests/serve_chat_client.py" "http://127.0.0.1:$port" plain 8 32
check "chat and streaming checks (serve_chat_client.py, plain)" $?
grep -q "client of a streamed request went away: dropped its 1 sequence(s); 8 of 8 key/value blocks free" "$work/serve.log"
rc=$?
check "the server dropped the sequence of the client that left and freed its blocks: $(grep -i 'went away\|streamed' "$work/serve.log")" $rc
stop_server
rc=$?
check "SIGTERM stops the server with exit status 0: $(tail -3 "$work/serve.log")" $rc

# The ChatML template, named by a model's tokenizer_config.json (whose text differs from tessera's copy
# only in layout).
python3 - "$work" <<'PY'
import json, sys
chatml = ("{%- for message in messages %}\n    {{- '<|im_start|>' + message[\"role\"] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\n"
          "{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n")
mistral = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
           "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
           "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% endfor %}")
for name, template in (("chatml", chatml), ("mistral", mistral)):
    with open(f"{sys.argv[1]}/{name}_config.json", "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "chat_template": template}, f)
PY
start_server "$work/serve2.log" "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 --served-model-name tiny \
  --chat-template "$work/chatml_config.json" "${pool[@]}"
rc=$?
check "the server starts with a tokenizer_config.json's ChatML template: $(cat "$work/serve2.log")" $rc
grep -q "chat template chatml ($work/chatml_config.json)" "$work/serve2.log"
rc=$?
check "the start-up line names the template and its file: $(head -3 "$work/serve2.log")" $rc
timeout 120 python3 "$root/tests/serve_chat_client.py" "http://127.0.0.1:$port" chatml 8 32 --no-disconnect
check "chat and streaming checks (serve_chat_client.py, chatml)" $?
stop_server
rc=$?
check "SIGTERM stops the second server with exit status 0: $(tail -3 "$work/serve2.log")" $rc

# A checkpoint that carries a tokenizer_config.json (as an imported Hugging Face model does) whose template
# tessera cannot render: by default (auto) the server serves everything but chat, which answers 400 saying
# why; asked for explicitly, the template is refused at start-up.
python3 - "$work/model" "$work/mistral_config.json" <<'PY'
import json, os, sys
def crc32c(data):  # Castagnoli's, as the checkpoint index records its files
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF
model, config = sys.argv[1], sys.argv[2]
with open(f"{model}/latest_checkpointed_iteration.txt") as f:
    directory = f"{model}/iter_{int(f.read().strip()):07d}"
with open(config, "rb") as f:
    data = f.read()
os.makedirs(f"{directory}/tokenizer", exist_ok=True)
with open(f"{directory}/tokenizer/tokenizer_config.json", "wb") as f:
    f.write(data)
with open(f"{directory}/index.json") as f:
    index = json.load(f)
index.setdefault("tokenizer_files", {})["tokenizer_config"] = {
    "file": "tokenizer/tokenizer_config.json", "bytes": len(data), "crc32c": "crc32c:%08x" % crc32c(data)}
with open(f"{directory}/index.json", "w") as f:
    json.dump(index, f, indent=1)
PY
start_server "$work/serve3.log" "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 "${pool[@]}"
rc=$?
check "the server starts with a carried template it cannot render: $(cat "$work/serve3.log")" $rc
grep -q "chat template none: --chat-template: the chat template of the checkpoint's tokenizer_config.json" "$work/serve3.log"
rc=$?
check "the start-up line says chat is not served and why: $(head -3 "$work/serve3.log")" $rc
chat=$(curl -s -w ' %{http_code}' -X POST -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}' \
  "http://127.0.0.1:$port/v1/chat/completions")
grep -q "needs a Jinja engine.*raise_exception().*start the server with --chat-template to serve chat.* 400$" <<<"$chat"
rc=$?
check "chat answers 400 naming the template's Jinja: $chat" $rc
completion=$(curl -s -w ' %{http_code}' -X POST -d '{"prompt": "Hi", "max_tokens": 2}' "http://127.0.0.1:$port/v1/completions")
grep -q '"text_completion".* 200$' <<<"$completion"
rc=$?
check "the other endpoints serve: $completion" $rc
stop_server
rc=$?
check "SIGTERM stops the third server with exit status 0: $(tail -3 "$work/serve3.log")" $rc
expect_failure "the chat template of the checkpoint's tokenizer_config.json" \
  "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 --chat-template auto

expect_failure "is not one of the templates tessera renders" \
  "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 --chat-template "$work/mistral_config.json"
expect_failure "raise_exception()" \
  "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 --chat-template "$work/mistral_config.json"
expect_failure "not a template name (plain, chatml, llama3, auto) nor a readable file" \
  "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 --chat-template vicuna

finish serve_chat_cli
