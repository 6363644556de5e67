#!/usr/bin/env bash
# MEGATRON-CNTRL end to end on the toy story set and knowledge base of make_toy_data.py, every stage's
# output shown:
#   1. the data: stories (ROCStories' CSV) and a knowledge base (ConceptNet's CSV);
#   2. `tessera cntrl preprocess`: RAKE keywords, retrieved knowledge, pseudo-labels, as three JSONL files;
#   3. tokenizers (SentencePiece BPE for the GPTs, WordPiece for the BERT) and brief pretraining of a tiny
#      GPT (`train`) and a tiny BERT (`pretrain_bert`) on the stories and the knowledge sentences;
#   4. `tessera finetune --task CNTRL-KEYWORDS | CNTRL-RANKER | CNTRL-GENERATOR`: the three stages;
#   5. `tessera cntrl generate`: held-out stories told sentence by sentence with predicted keywords,
#      then with sentence 2's keywords replaced (the control), and the controllability of both.
# usage: examples/cntrl/run_cntrl.sh [TESSERA] [OUT]   (EPOCHS=N scales the fine-tuning; default 6)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tessera=${1:-$root/build/release/tessera}
out=${2:-$root/out/cntrl}
epochs=${EPOCHS:-6}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # tiny models: more threads only wait for each other
mkdir -p "$out"
say() { printf '\n=== %s\n' "$*"; }

say "1. toy stories and knowledge base"
python3 "$root/examples/cntrl/make_toy_data.py" "$out/data" > /dev/null
head -3 "$out/data/stories.csv"
head -3 "$out/data/conceptnet.csv" | cut -f2-4

say "2. cntrl preprocess"
for split in "" valid_; do
  "$tessera" cntrl preprocess --stories "$out/data/${split}stories.csv" --knowledge-base "$out/data/conceptnet.csv" \
    --output-prefix "$out/${split}cntrl" --top-n 3
done
head -1 "$out/cntrl_keywords.jsonl"; head -1 "$out/cntrl_ranker.jsonl"; head -1 "$out/cntrl_generator.jsonl"

say "3. tokenizers and pretraining"
# Pretraining text: the stories and every prompt format the stages use.
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
with open(out + "/corpus.txt", "w") as text, open(out + "/corpus.jsonl", "w") as docs:
    keywords = [json.loads(line) for line in open(out + "/cntrl_keywords.jsonl")]
    for i, line in enumerate(open(out + "/cntrl_generator.jsonl")):
        g, k = json.loads(line), keywords[i]
        for doc in ("Knowledge: " + " ".join(s + "." for s in g["knowledge_topN"]) + " Story: " + g["context"] + " " + g["target"],
                    g["context"] + " Keywords: " + ", ".join(k["keywords"])):
            text.write(doc + "\n")
            docs.write(json.dumps({"text": doc}) + "\n")
PY
"$tessera" tokenizer train --input "$out/corpus.txt" --model-prefix "$out/sp" --vocab-size 320 --model-type bpe \
  > "$out/sp.log" 2>&1
"$tessera" tokenizer train --model-type wordpiece --input "$out/corpus.txt" --model-prefix "$out/wp" --vocab-size 400 \
  > "$out/wp.log" 2>&1
gpt_tok=(--tokenizer-type SentencePieceTokenizer --tokenizer-model "$out/sp.model")
bert_tok=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$out/wp-vocab.txt")
"$tessera" preprocess --input "$out/corpus.jsonl" --json-keys text --append-eod --output-prefix "$out/gpt" \
  "${gpt_tok[@]}" > /dev/null
"$tessera" preprocess --input "$out/corpus.jsonl" --json-keys text --split-sentences --output-prefix "$out/bert" \
  "${bert_tok[@]}" > /dev/null
model=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 96 --max-position-embeddings 96)
"$tessera" train "${model[@]}" "${gpt_tok[@]}" --data-path "$out/gpt_text_document" --split 98,2,0 \
  --micro-batch-size 16 --global-batch-size 16 --train-iters 150 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine \
  --hidden-dropout 0 --attention-dropout 0 --log-interval 50 --eval-interval 150 --eval-iters 2 \
  --save "$out/gpt_pretrained" | grep -E "iteration +150/|validation loss"
"$tessera" pretrain_bert "${model[@]}" "${bert_tok[@]}" --data-path "$out/bert_text_sentence" --split 98,2,0 \
  --micro-batch-size 16 --global-batch-size 16 --train-iters 100 --lr 1e-3 --log-interval 50 --eval-interval 100 \
  --eval-iters 2 --save "$out/bert_pretrained" | grep -E "iteration +100/|validation loss"

say "4. fine-tuning the three stages"
ft=(--micro-batch-size 16 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-fraction 0.05
    --hidden-dropout 0 --attention-dropout 0 --log-interval 1000)
# finetune TASK LR PRETRAINED NAME: the pretrained model evaluated first (--epochs 0, Megatron's
# evaluation-only mode, logged as epoch -1), then fine-tuned; both into finetune_NAME.log.
finetune() {
  local args=(--task "CNTRL-$1" "${ft[@]}" --lr "$2" --pretrained-checkpoint "$out/$3"
              --valid-data "$out/valid_cntrl_$4.jsonl")
  "$tessera" finetune "${args[@]}" --epochs 0 > "$out/finetune_$4.log"
  "$tessera" finetune "${args[@]}" --epochs "$epochs" --train-data "$out/cntrl_$4.jsonl" --save "$out/$4" \
    >> "$out/finetune_$4.log"
}
finetune KEYWORDS 2e-3 gpt_pretrained keywords
finetune GENERATOR 2e-3 gpt_pretrained generator
finetune RANKER 1e-3 bert_pretrained ranker
for file in keywords generator; do grep "validation loss at epoch" "$out/finetune_$file.log" | sed -n '1p;$p'; done
grep "metrics for" "$out/finetune_ranker.log" | sed -n '1p;$p'

say "5. story generation"
models=(--keyword-load "$out/keywords" --ranker-load "$out/ranker" --generator-load "$out/generator"
        --knowledge-base "$out/data/conceptnet.csv" --input "$out/data/control.jsonl" --top-n 3)
"$tessera" cntrl generate "${models[@]}" --predict-keywords --output "$out/stories_predicted.jsonl" \
  > "$out/stories_predicted.txt"
"$tessera" cntrl generate "${models[@]}" --output "$out/stories_controlled.jsonl" > "$out/stories_controlled.txt"
echo "predicted keywords:"; sed -n '1,/story: /p' "$out/stories_predicted.txt"
echo "sentence 2's keywords given:"; sed -n '1,/story: /p' "$out/stories_controlled.txt"
grep -h "controllability" "$out/stories_predicted.txt" "$out/stories_controlled.txt"
