#!/usr/bin/env bash
# tessera msdp end to end on a small hand-made Wizard of Wikipedia set: Megatron's preprocessing
# functions, stage 1 (knowledge) with a local model and through a running `tessera serve` (the same
# greedy lines), prepare_input, stage 2 (response) through the server, and MSDP-EVAL-F1 on hand-computed
# files. The model is tiny and untrained: the check is the pipeline and its formats, not the quality.
set -uo pipefail
tessera=${1:?usage: msdp_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TESSERA_DATA_CACHE:-$root/data-cache}
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT
source "$root/tests/lib/checks.sh"
source "$root/tests/lib/server.sh"
[ -f "$cache/gpt2/gpt2-vocab.json" ] || skip "no GPT-2 vocabulary in $cache/gpt2 (scripts/setup.sh fetches it)"
tokenizer=(--tokenizer-type GPT2BPETokenizer --vocab-file "$cache/gpt2/gpt2-vocab.json"
           --merge-file "$cache/gpt2/gpt2-merges.txt")

# Raw Wizard of Wikipedia JSON: training dialogues on three topics whose responses copy their knowledge,
# and a test set with one seen and one unseen topic.
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
facts = {
    "Cat": "the cat is a small domesticated carnivorous mammal that people keep as a pet",
    "Jazz": "jazz is a music genre that originated in the african american communities of new orleans",
    "Tea": "tea is an aromatic beverage prepared by pouring hot water over cured leaves of the plant",
}
def dialogue(topic, opener):
    fact = facts[topic]
    return {"chosen_topic": topic, "dialog": [
        {"speaker": "1_Apprentice", "text": opener},
        {"speaker": "0_Wizard", "text": "Well, " + fact + " as you know",
         "checked_sentence": {topic + "_0": fact}, "checked_passage": {topic: topic}},
        {"speaker": "1_Apprentice", "text": "Tell me more about " + topic.lower()},
        {"speaker": "0_Wizard", "text": "I am not sure", "checked_sentence": {}, "checked_passage": {}}]}
train = [dialogue(t, o) for t in facts for o in ("Do you know about " + t.lower() + "?", "I like " + t.lower())]
test = [dialogue("Cat", "What is a cat?"), {"chosen_topic": "Owl", "dialog": [
    {"speaker": "1_Apprentice", "text": "Owls are birds"},
    {"speaker": "0_Wizard", "text": "They hunt at night", "checked_sentence": {"Owl_0": "owls hunt at night"},
     "checked_passage": {"Owl": "Owl"}}]}]
json.dump(train, open(work + "/train.json", "w"))
json.dump(test, open(work + "/test.json", "w"))
PY
pre() { "$tessera" msdp preprocess "$@" >/dev/null 2>"$work/err"; }
pre --func process_wow_dataset --raw_file "$work/train.json" --processed_file "$work/train.txt"
rc=$?
check "process_wow_dataset (train) exits 0: $(cat "$work/err")" $rc
pre --func process_wow_dataset --raw_file "$work/test.json" --processed_file "$work/test.txt" \
  --knwl_ref_file "$work/test_knowledge.txt" --resp_ref_file "$work/test_response.txt"
rc=$?
check "process_wow_dataset (test) exits 0: $(cat "$work/err")" $rc
[ "$(wc -l <"$work/train.txt")" -eq 12 ] && [ "$(wc -l <"$work/test.txt")" -eq 3 ] &&
  [ "$(awk -F'\t' 'NF != 4' "$work/train.txt" "$work/test.txt" | wc -l)" -eq 0 ]
rc=$?
check "two Wizard turns per training dialogue, 4 tab-separated fields: $(head -2 "$work/train.txt")" $rc
[ "$(sed -n 3p "$work/test_knowledge.txt")" = "owls hunt at night" ] &&
  [ "$(sed -n 3p "$work/test_response.txt")" = "They hunt at night ." ]
rc=$?
check "reference files: gold knowledge and word-tokenized responses: $(cat "$work/test_response.txt")" $rc
pre --func get_knwl_gen_prompts --test_file "$work/test.txt" --train_file "$work/train.txt" \
  --processed_file "$work/knowledge_prompts.jsonl" --data_type wow_seen
rc=$?
check "get_knwl_gen_prompts exits 0: $(cat "$work/err")" $rc
python3 - "$work/knowledge_prompts.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 3, lines
(key, examples), = lines[0].items()
assert key == "Cat What is a cat?", key
assert examples and all(" => " in e for e in examples) and examples[-1].endswith(" Cat => the cat is a small domesticated carnivorous mammal that people keep as a pet"), examples
PY
rc=$?
check "knowledge prompts: one line per test sample, the seen topic's examples: $(head -c 300 "$work/knowledge_prompts.jsonl")" $rc
pre --func get_resp_gen_prompts --train_file "$work/train.txt" --processed_file "$work/response_prompts.txt"
rc=$?
check "get_resp_gen_prompts exits 0: $(cat "$work/err")" $rc
[ "$(wc -l <"$work/response_prompts.txt")" -eq 6 ] && grep -q "^Topic: Jazz. User says: .* We know that: jazz is .* System replies: Well , jazz" "$work/response_prompts.txt"
rc=$?
check "response prompts: the 6 turns that copy their knowledge: $(head -2 "$work/response_prompts.txt")" $rc

# A tiny model of GPT-2's vocabulary (the NullTokenizer adds its end-of-document id to the 50256),
# trained on mock ids and used with GPT-2's tokenizer (rotary
# positions: the prompts are long).
"$tessera" train --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --num-layers 2 --hidden-size 32 --num-attention-heads 4 \
  --seq-length 64 --position-embedding-type rope --micro-batch-size 2 --global-batch-size 2 --train-iters 2 \
  --lr 1e-3 --eval-iters 0 --save "$work/model" >"$work/train.log" 2>&1
rc=$?
check "training the tiny model exits 0: $(tail -3 "$work/train.log")" $rc
stage1=(--task MSDP-PROMPT --prompt-type knowledge --prompt-file "$work/knowledge_prompts.jsonl"
        --sample-input-file "$work/test.txt" --out-seq-length 20)
"$tessera" msdp "${stage1[@]}" --load "$work/model" "${tokenizer[@]}" --sample-output-file "$work/knowledge_local.txt" >/dev/null 2>"$work/err"
rc=$?
check "stage 1 with a local model exits 0: $(tail -3 "$work/err")" $rc
[ "$(wc -l <"$work/knowledge_local.txt")" -eq 3 ] && grep -q "samples" "$work/err"
rc=$?
check "stage 1 writes one line per test sample and shows progress: $(cat "$work/err")" $rc

# MSDP's few-shot prompts (95 tokens) are longer than this tiny RoPE model's --seq-length 64, which is the
# server's default --max-prompt-tokens; rotary positions take them (as the local stage-1 run above does).
start_server "$work/serve.log" "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 --max-prompt-tokens 512
rc=$?
check "the server starts: $(cat "$work/serve.log")" $rc
url=http://127.0.0.1:$port/api
"$tessera" msdp "${stage1[@]}" --api-prompt --megatron-api-url "$url" --sample-output-file "$work/knowledge_api.txt" \
  >/dev/null 2>"$work/err"
rc=$?
check "stage 1 through the server exits 0: $(tail -3 "$work/err")" $rc
cmp -s "$work/knowledge_local.txt" "$work/knowledge_api.txt"
rc=$?
check "the server's greedy knowledge equals the local model's: $(paste "$work/knowledge_local.txt" "$work/knowledge_api.txt")" $rc
pre --func prepare_input --test_file "$work/test.txt" --knwl_gen_file "$work/knowledge_api.txt" \
  --processed_file "$work/test_generated.txt"
rc=$?
check "prepare_input exits 0: $(cat "$work/err")" $rc
[ "$(cut -f3 "$work/test_generated.txt")" = "$(sed 's/^[[:space:]]*//;s/[[:space:]]*$//' "$work/knowledge_api.txt")" ]
check "prepare_input puts the generated knowledge in the third column" $?
"$tessera" msdp --task MSDP-PROMPT --prompt-type response --prompt-file "$work/response_prompts.txt" \
  --num-prompt-examples 20 --sample-input-file "$work/test_generated.txt" --out-seq-length 20 \
  --api-prompt --megatron-api-url "$url" >/dev/null 2>"$work/err"
rc=$?
check "stage 2 through the server exits 0 (default output: input + .out): $(tail -3 "$work/err")" $rc
[ "$(wc -l <"$work/test_generated.txt.out")" -eq 3 ]
check "stage 2 writes one response per test sample" $?
stop_server

# F1 as ParlAI computes it: pairs with "no_passages_used" or empty answers do not count.
printf 'The cat sat on the mat.\nanything\n\n' >"$work/guess.txt"
printf 'a cat is on a mat\nno_passages_used\nx\n' >"$work/answer.txt"
out=$("$tessera" msdp --task MSDP-EVAL-F1 --guess-file "$work/guess.txt" --answer-file "$work/answer.txt" 2>&1)
[ "$out" = "Precision: 0.3750; recall: 0.3750; f1: 0.3750" ]
check "MSDP-EVAL-F1 prints Megatron's line with the hand-computed means: $out" $?
out2=$("$tessera" msdp --task MSDP-EVAL-F1 --guess-file "$work/test_generated.txt.out" --answer-file "$work/test_response.txt" 2>&1)
grep -q "^Precision: " <<<"$out2"
check "F1 of the generated responses against the references: $out2" $?

# Errors name the flag or the file and line.
expect_failure "--prompt-type" "$tessera" msdp --task MSDP-PROMPT --prompt-file x --sample-input-file "$work/test.txt" \
  --api-prompt --megatron-api-url "$url"
printf 'only\ttwo\n' >"$work/bad.txt"
expect_failure "bad.txt:1: 2 tab-separated fields" "$tessera" msdp preprocess --func get_resp_gen_prompts \
  --train_file "$work/bad.txt" --processed_file "$work/x"
expect_failure "--data_type=wow: expected wow_seen, wow_unseen or woi" "$tessera" msdp preprocess \
  --func get_knwl_gen_prompts --test_file "$work/test.txt" --train_file "$work/train.txt" --processed_file "$work/x" --data_type wow
expect_failure "lines, --answer-file" "$tessera" msdp --task MSDP-EVAL-F1 --guess-file "$work/guess.txt" \
  --answer-file "$work/train.txt"

finish msdp_cli
