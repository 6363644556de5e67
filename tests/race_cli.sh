#!/usr/bin/env bash
# tessera finetune --task RACE end to end: a WordPiece vocabulary trained on generated text, a tiny BERT
# pretrained on that text (pretrain_bert, real sentences), then fine-tuned on a synthetic multiple-choice
# set in RACE's format (directories RACE/{train,dev}/{middle,high}, one JSON object per line, plain and
# cloze questions). Each article states which object a box holds, among other facts; the right option is
# that object, the three others are objects no article mentions. A model this small, this briefly
# trained, learns that split of the options quickly and reliably; comparing each option with the article
# (the same pool for right and wrong options) it learns too, but only after a plateau of a length that
# varies with the seed, too long for a test. So this checks the path (the reader, the choices' rows and
# labels, the pretrained encoder, the head, the loss, accuracy per dev subset), not reading: accuracy per
# dev subset must be well above chance (25%), the evaluation-only mode must reproduce it from the saved
# fine-tuned checkpoint, and flag errors name the flag.
set -uo pipefail
tessera=${1:?usage: race_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
command -v python3 > /dev/null || skip "python3 is needed to generate the data"
export OMP_NUM_THREADS=1  # a tiny model: on a shared 2-core machine, more threads only wait for each other

python3 - "$work" <<'EOF'
import json, os, random, sys
work = sys.argv[1]
rng = random.Random(7)
objects = ["apple", "ball", "pencil", "shoe", "cup", "key"]
others = ["book", "coin", "lamp", "hat", "spoon", "clock"]  # never in an article
colors = ["red", "blue", "green", "yellow", "white", "black"]
names = ["tom", "anna", "sam", "lily", "ben", "kate"]
foods = ["bread", "rice", "soup", "cake", "fish", "milk"]

def article(obj):
    facts = ["The box holds a %s." % obj,
             "The sky is %s today." % rng.choice(colors),
             "%s likes %s." % (rng.choice(names).capitalize(), rng.choice(foods))]
    rng.shuffle(facts)
    return "\n".join(facts)

def document(i):
    questions, options, answers = [], [], []
    obj = rng.choice(objects)
    text = article(obj)
    for q in range(2):
        choices = [obj] + rng.sample(others, 3)
        rng.shuffle(choices)
        questions.append("What does the box hold?" if q == 0 else "The box holds a _.")
        options.append(choices)
        answers.append("ABCD"[choices.index(obj)])
    return {"article": text, "questions": questions, "options": options, "answers": answers, "id": "%d.txt" % i}

corpus = open(os.path.join(work, "corpus.txt"), "w")
docs = open(os.path.join(work, "docs.jsonl"), "w")
for i in range(600):
    text = article(rng.choice(objects))
    corpus.write(text + " " + " ".join(others) + "\n")  # every word in the vocabulary
    docs.write(json.dumps({"text": text.replace("\n", " ")}) + "\n")
counts = {"train": 300, "dev": 100}
for split, n in counts.items():
    for level in ["middle", "high"]:
        d = os.path.join(work, "RACE", split, level)
        os.makedirs(d)
        for part in range(2):  # two files per directory
            with open(os.path.join(d, "%d.txt" % part), "w") as f:
                for i in range(n // 2):
                    f.write(json.dumps(document(i)) + "\n")
EOF
check "generating the data" $?

"$tessera" tokenizer train --model-type wordpiece --input "$work/corpus.txt" --model-prefix "$work/wp" \
  --vocab-size 2000 > "$work/tok.txt" 2>&1
ok=$?; check "tokenizer train --model-type wordpiece: $(tail -3 "$work/tok.txt")" $ok
tok=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$work/wp-vocab.txt")
"$tessera" preprocess --input "$work/docs.jsonl" --output-prefix "$work/corpus" --split-sentences "${tok[@]}" \
  > "$work/pre.txt" 2>&1
ok=$?; check "preprocess --split-sentences: $(tail -3 "$work/pre.txt")" $ok

model=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 48 --max-position-embeddings 48)
"$tessera" pretrain_bert "${model[@]}" "${tok[@]}" --data-path "$work/corpus_text_sentence" --split 98,2,0 \
  --micro-batch-size 8 --global-batch-size 8 --train-iters 20 --lr 1e-3 --eval-iters 1 --eval-interval 20 \
  --log-interval 10 --save "$work/bert" > "$work/pretrain.txt" 2>&1
ok=$?; check "pretrain_bert: $(tail -5 "$work/pretrain.txt")" $ok

ft=(--task RACE --valid-data "$work/RACE/dev/middle" "$work/RACE/dev/high" --pretrained-checkpoint "$work/bert"
    --lr 1e-3 --lr-decay-style linear --lr-warmup-fraction 0.06 --weight-decay 0.1 --clip-grad 1.0
    --hidden-dropout 0.1 --attention-dropout 0.1 "${tok[@]}" --log-interval 50)
train=(--train-data "$work/RACE/train/middle" "$work/RACE/train/high")
"$tessera" finetune "${ft[@]}" "${train[@]}" --micro-batch-size 8 --epochs 3 --save "$work/race" > "$work/ft.txt" 2>&1
ok=$?; check "finetune --task RACE: $(tail -15 "$work/ft.txt")" $ok

# Megatron's lines: the datasets, the discarded heads, the new head, the metrics per subset and overall.
grep -q "^  >> total number of samples: 1200$" "$work/ft.txt"
ok=$?; check "1200 training questions: $(grep 'total number' "$work/ft.txt")" $ok
grep -q "^    > processed 100 document, 200 questions, and 200 samples in " "$work/ft.txt"
ok=$?; check "each dev directory: 100 documents, 200 questions" $ok
grep -q "not used by the multiple-choice model: .*lm_head.dense.weight" "$work/ft.txt" &&
  grep -q "could not find multichoice_head.weight in the checkpoint, initializing to random" "$work/ft.txt"
ok=$?; check "the masked-LM head is discarded and the multiple-choice head initialised" $ok
! grep -q "could not find embedding.word_embeddings.weight\|could not find pooler" "$work/ft.txt"
ok=$?; check "the encoder and pooler come from the pretrained checkpoint" $ok
[ "$(grep -c '^calculating metrics \.\.\.$' "$work/ft.txt")" -eq 3 ]
ok=$?; check "metrics after each of the 3 epochs" $ok

accuracy() {  # accuracy FILE EPOCH SUBSET -> the percentage Megatron's line gives
  sed -n "s/^ > |epoch: $2| metrics for $3: correct \/ total = [0-9]* \/ 200 = \([0-9.]*\) %, elapsed time (sec): .*/\1/p" "$1"
}
for subset in dev-middle dev-high; do
  acc=$(accuracy "$work/ft.txt" 2 "$subset")
  [ -n "$acc" ] && python3 -c "import sys; sys.exit(0 if float('$acc') >= 60 else 1)"
  ok=$?; check "accuracy on $subset after 3 epochs well above 25% (>= 60): '$acc'
$(grep -e 'metrics for' -e 'lm loss' "$work/ft.txt" | tail -12)" $ok
done
grep -q "^ >> |epoch: 2| overall: correct / total = [0-9]* / 400 = " "$work/ft.txt"
ok=$?; check "the overall line" $ok
# The loss falls.
first=$(grep -m1 -o 'lm loss: [0-9.E+-]*' "$work/ft.txt" | awk '{print $3}')
last=$(grep -o 'lm loss: [0-9.E+-]*' "$work/ft.txt" | tail -1 | awk '{print $3}')
python3 -c "import sys; sys.exit(0 if float('$last') < float('$first') else 1)"
ok=$?; check "the loss falls ($first -> $last)" $ok

# Evaluation only, from the fine-tuned checkpoint: the same accuracies, as epoch -1.
"$tessera" finetune --task RACE --valid-data "$work/RACE/dev/middle" "$work/RACE/dev/high" \
  --pretrained-checkpoint "$work/race" --epochs 0 --micro-batch-size 16 > "$work/eval.txt" 2>&1
ok=$?; check "finetune --epochs 0: $(tail -5 "$work/eval.txt")" $ok
grep -q "^evaluation only mode, setting epoch to -1$" "$work/eval.txt" && ! grep -q "initializing to random" "$work/eval.txt"
ok=$?; check "evaluation only, every parameter loaded: $(grep -i 'warning' "$work/eval.txt")" $ok
for subset in dev-middle dev-high; do
  [ "$(accuracy "$work/eval.txt" -1 "$subset")" = "$(accuracy "$work/ft.txt" 2 "$subset")" ]
  ok=$?; check "the saved checkpoint gives the last epoch's accuracy on $subset" $ok
done

# Flag errors name the flag.
expect_failure "--task=SQuAD" "$tessera" finetune --task SQuAD --pretrained-checkpoint "$work/bert"
expect_failure "--seed: -1 must be a positive integer below 2^32" "$tessera" finetune --task RACE --seed=-1 \
  --pretrained-checkpoint "$work/bert"
expect_failure "--pretrained-checkpoint" "$tessera" finetune --task RACE --epochs 1 --train-data "$work/RACE/train/high"
expect_failure "--seq-length=64: must be at most" "$tessera" finetune "${ft[@]}" "${train[@]}" --epochs 1 --seq-length 64
expect_failure "does not exist" "$tessera" finetune "${ft[@]}" --epochs 1 --train-data "$work/RACE/nothing"
expect_failure "--micro-batch-size=2000" "$tessera" finetune "${ft[@]}" "${train[@]}" --epochs 1 --micro-batch-size 2000

finish race_cli
