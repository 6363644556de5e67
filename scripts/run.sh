#!/usr/bin/env bash
# Set-up, build and the main job: preprocess the Brown corpus with GPT-2's tokenizer (once), train a
# small GPT on it over several MPI ranks, then sample continuations from the checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
cache=${TESSERA_DATA_CACHE:-data-cache}
out=${OUT_DIR:-out/run}
tessera=build/release/tessera
tokenizer=(--tokenizer-type GPT2BPETokenizer --vocab-file "$cache/gpt2/gpt2-vocab.json"
           --merge-file "$cache/gpt2/gpt2-merges.txt")

if [ ! -f "$cache/brown/brown_text_document.idx" ]; then
  "$tessera" preprocess --input "$cache/brown/brown.jsonl" --json-keys text --append-eod --workers "$(nproc)" \
    --output-prefix "$cache/brown/brown" "${tokenizer[@]}"
fi

rm -rf "$out"
mkdir -p "$out"
# Two data-parallel ranks, one thread each (this machine has 2 cores; on a larger one raise RANKS and
# OMP_NUM_THREADS, or add --tensor-model-parallel-size).
ranks=${RANKS:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))}
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_coll_libnbc_iallreduce_algorithm=${OMPI_MCA_coll_libnbc_iallreduce_algorithm:-1}  # ring
mpirun --oversubscribe --allow-run-as-root -np "$ranks" "$tessera" train \
  --num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 \
  --data-path "$cache/brown/brown_text_document" --split 98,2,0 "${tokenizer[@]}" \
  --micro-batch-size 4 --global-batch-size 8 --train-iters ${TRAIN_ITERS:-300} \
  --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-fraction 0.1 --weight-decay 0.1 --clip-grad 1.0 \
  --hidden-dropout 0 --attention-dropout 0 \
  --log-interval 10 --eval-interval 100 --eval-iters 5 \
  --save "$out/checkpoints" --save-interval 100 \
  --log-dir "$out/logs" --tensorboard-dir "$out/tensorboard"

echo
echo "Samples (top-k 20):"
"$tessera" generate --load "$out/checkpoints" --tokens-to-generate 40 --top-k 20 --random-seed 1 \
  --prompt "The jury said" --prompt "In the morning, the" --prompt "Science is"
echo "checkpoints: $out/checkpoints, metrics: $out/logs/metrics.jsonl, TensorBoard: $out/tensorboard"
