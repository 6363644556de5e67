#!/usr/bin/env bash
# MEGATRON-CNTRL end to end (examples/cntrl/run_cntrl.sh on its toy stories and knowledge base): the
# three fine-tuned stages learn (validation loss falls, the ranker beats chance), `cntrl generate` tells
# every story sentence by sentence, the control works (sentence 2 of each story mentions its given
# keyword or a knowledge-base neighbour far more often than with predicted keywords), a seed reproduces
# the stories, and bad input names the flag or the file and line.
set -uo pipefail
tessera=${1:?usage: cntrl_pipeline_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
command -v python3 > /dev/null || skip "python3 is needed to generate the toy data"
export OMP_NUM_THREADS=1
# Two epochs per stage (the example's default is 6): each stage is near its final loss after two, and the
# ranker at its best after one; the suite's time goes to the fine-tuning, the ranker's above all.
export EPOCHS=2

out=$(bash "$root/examples/cntrl/run_cntrl.sh" "$tessera" "$work" 2>&1)
rc=$?
check "examples/cntrl/run_cntrl.sh exits 0: $(tail -20 <<<"$out")" $rc
[ $rc -eq 0 ] || { finish cntrl_pipeline_cli; exit; }

python3 - "$work" "$EPOCHS" <<'PY'
import json, re, sys
w, epochs = sys.argv[1], int(sys.argv[2])
def losses(name):
    v = [float(m) for m in re.findall(r"validation loss at epoch -?\d+ on valid_cntrl_\w+ \| lm loss value: (\S+)",
                                      open(f"{w}/finetune_{name}.log").read())]
    assert len(v) == 1 + epochs, (name, v)  # the pretrained model (epoch -1), then after each epoch
    return v
for name in ("keywords", "generator"):
    v = losses(name)
    assert v[-1] < 0.6 * v[0], (name, v)
acc = [float(m) for m in re.findall(r"metrics for valid_cntrl_ranker: correct / total = \d+ / \d+ = (\S+) %",
                                    open(f"{w}/finetune_ranker.log").read())]
assert len(acc) == 1 + epochs and acc[-1] >= 50.0, acc  # 4 choices: chance is 25%
requests = [json.loads(l) for l in open(f"{w}/data/control.jsonl")]
for kind in ("predicted", "controlled"):
    stories = [json.loads(l) for l in open(f"{w}/stories_{kind}.jsonl")]
    assert len(stories) == len(requests) == 24, (kind, len(stories))
    for s, r in [(stories[i], requests[i]) for i in range(len(stories))]:
        assert s["context"] == r["context"] and len(s["sentences"]) == 4, s
        for i, step in enumerate(s["sentences"]):
            given = kind == "controlled" and i < len(r["keywords"]) and r["keywords"][i] is not None
            assert step["keywords_given"] == given, (kind, i, step)
            if given:
                assert step["keywords"] == r["keywords"][i], (step, r)
            assert len(step["scores"]) == len(step["knowledge"]) and len(step["ranked"]) == min(3, len(step["knowledge"])), step
            assert all(k in step["knowledge"] for k in step["ranked"]), step
            order = [step["scores"][step["knowledge"].index(k)] for k in step["ranked"]]
            assert order == sorted(order, reverse=True), step
        assert s["sentences"][0]["sentence"], s  # the sentence the control is measured on
        assert s["story"].startswith(s["context"]), s
def controllability(kind):
    m = re.search(r"controllability.*: (\d+) / (\d+) = ", open(f"{w}/stories_{kind}.txt").read())
    return int(m.group(1)) / int(m.group(2))
assert controllability("controlled") >= 0.75 and controllability("predicted") <= 0.25, \
    (controllability("controlled"), controllability("predicted"))
PY
check "the stages learn, 24 stories of 4 new sentences, ranked knowledge, controllability >= 75% against a baseline <= 25%" $?

models=(--keyword-load "$work/keywords" --ranker-load "$work/ranker" --generator-load "$work/generator"
        --knowledge-base "$work/data/conceptnet.csv")
"$tessera" cntrl generate "${models[@]}" --top-n 3 --input "$work/data/control.jsonl" --output "$work/again.jsonl" > /dev/null 2>&1
cmp -s "$work/again.jsonl" "$work/stories_controlled.jsonl"
check "greedy decoding tells the same stories again" $?
head -4 "$work/data/control.jsonl" > "$work/four.jsonl"
sample=(--temperature 0.9 --top-k 0 --top-p 0.9 --random-seed 5)
"$tessera" cntrl generate "${models[@]}" "${sample[@]}" --input "$work/four.jsonl" --output "$work/s1.jsonl" > /dev/null 2>&1
"$tessera" cntrl generate "${models[@]}" "${sample[@]}" --input "$work/four.jsonl" --output "$work/s2.jsonl" \
  --micro-batch-size 1 > /dev/null 2>&1
cmp -s "$work/s1.jsonl" "$work/s2.jsonl" && [ -s "$work/s1.jsonl" ]
check "a seed reproduces sampled stories, batched together or one by one" $?

printf '{"context": "Tom was hungry."}\n[1]\n' > "$work/bad.jsonl"
expect_failure "bad.jsonl:2: not a JSON object" "$tessera" cntrl generate "${models[@]}" --input "$work/bad.jsonl"
expect_failure "--ranker-load" "$tessera" cntrl generate --keyword-load "$work/keywords" \
  --generator-load "$work/generator" --knowledge-base "$work/data/conceptnet.csv" --input "$work/four.jsonl"
expect_failure "--ranker-load=$work/generator" "$tessera" cntrl generate --keyword-load "$work/keywords" \
  --ranker-load "$work/generator" --generator-load "$work/generator" --knowledge-base "$work/data/conceptnet.csv" \
  --input "$work/four.jsonl"
expect_failure "--top-n" "$tessera" cntrl generate "${models[@]}" --input "$work/four.jsonl" --top-n 0
expect_failure "--pretrained-checkpoint=$work/gpt_pretrained" "$tessera" finetune --task CNTRL-RANKER --epochs 1 \
  --pretrained-checkpoint "$work/gpt_pretrained" --train-data "$work/cntrl_ranker.jsonl" \
  --valid-data "$work/valid_cntrl_ranker.jsonl"
expect_failure "--pretrained-checkpoint=$work/bert_pretrained" "$tessera" finetune --task CNTRL-GENERATOR --epochs 1 \
  --pretrained-checkpoint "$work/bert_pretrained" --train-data "$work/cntrl_generator.jsonl" \
  --valid-data "$work/valid_cntrl_generator.jsonl"
expect_failure "cntrl_ranker.jsonl:1" "$tessera" finetune --task CNTRL-GENERATOR --epochs 1 \
  --pretrained-checkpoint "$work/gpt_pretrained" --train-data "$work/cntrl_ranker.jsonl" \
  --valid-data "$work/valid_cntrl_generator.jsonl"
finish cntrl_pipeline_cli
