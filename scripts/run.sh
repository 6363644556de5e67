#!/usr/bin/env bash
# Set-up, build and the main job: a SentencePiece tokenizer trained on the Brown corpus's training
# documents, a small GPT trained on it over several MPI ranks for a fixed budget of iterations (about
# five minutes on a 2-core machine), a plot of its loss curves, then sampled continuations.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
cache=${TESSERA_DATA_CACHE:-data-cache}
out=${OUT_DIR:-out/run}
tessera=build/release/tessera
brown=$cache/brown
vocab=4096
tokenizer=(--tokenizer-type SentencePieceTokenizer --tokenizer-model "$brown/brown_sp$vocab.model")

# Once: the Brown corpus's SentencePiece tokenizer and .bin/.idx dataset (scripts/prepare_brown.sh).
scripts/prepare_brown.sh "$tessera" "$brown" "$vocab"

rm -rf "$out"
mkdir -p "$out"
# Two data-parallel ranks, one thread each (this machine has 2 cores; on a larger one raise RANKS and
# OMP_NUM_THREADS, or add --tensor-model-parallel-size).
ranks=${RANKS:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))}
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_coll_libnbc_iallreduce_algorithm=${OMPI_MCA_coll_libnbc_iallreduce_algorithm:-1}  # ring
# mpirun hands the ranks a pseudo-terminal even when its output goes to a file: ask for the progress
# bar only when this script's output is a terminal.
[ -t 1 ] && export TESSERA_PROGRESS=1
start=$(date +%s)
mpirun --oversubscribe --allow-run-as-root -np "$ranks" "$tessera" train \
  --num-layers 3 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 \
  --data-path "$brown/brown_sp${vocab}_text_document" --split 98,2,0 "${tokenizer[@]}" \
  --micro-batch-size 8 --global-batch-size 16 --train-iters ${TRAIN_ITERS:-1750} \
  --lr 1.5e-3 --min-lr 1.5e-4 --lr-decay-style cosine --lr-warmup-fraction 0.05 --weight-decay 0.1 --clip-grad 1.0 \
  --hidden-dropout 0 --attention-dropout 0 \
  --log-interval 50 --eval-interval 350 --eval-iters 16 \
  --save "$out/checkpoints" --save-interval 875 \
  --log-dir "$out/logs" --tensorboard-dir "$out/tensorboard"
echo "training took $(( $(date +%s) - start )) s"

echo "loss curves: $(/usr/bin/python3 scripts/plot_losses.py "$out/logs")"
echo
echo "Samples (top-k 20):"
"$tessera" generate --load "$out/checkpoints" --tokens-to-generate 40 --top-k 20 --random-seed 1 \
  --prompt "The jury said" --prompt "In the morning, the" --prompt "Science is"
echo "checkpoints: $out/checkpoints, metrics: $out/logs/metrics.jsonl, TensorBoard: $out/tensorboard"
