#!/usr/bin/env bash
# Set-up, build and the main job: train the default GPT on the default corpus and show what it learnt.
# Until the data pipeline lands the default corpus is --mock-data: arithmetic sequences modulo the
# vocabulary, which a working model learns to continue.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
out=${OUT_DIR:-out/run}
rm -rf "$out"
mkdir -p "$out"
# Two MPI ranks splitting the model with tensor and sequence parallelism, one thread each (this machine
# has 2 cores; on a larger one raise RANKS and OMP_NUM_THREADS).
ranks=${RANKS:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 ))}
export OMPI_MCA_mpi_yield_when_idle=1
mpirun --oversubscribe --allow-run-as-root -np "$ranks" build/release/tessera train \
  --tensor-model-parallel-size "$ranks" --sequence-parallel \
  --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 64 \
  --mock-data --tokenizer-type NullTokenizer --vocab-size 255 \
  --micro-batch-size 8 --global-batch-size 16 --train-iters 200 \
  --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 --weight-decay 0.01 --clip-grad 1.0 \
  --hidden-dropout 0 --attention-dropout 0 \
  --log-interval 20 --eval-interval 100 --eval-iters 4 \
  --save "$out/checkpoints" --save-interval 100 \
  --log-dir "$out/logs" --tensorboard-dir "$out/tensorboard"
echo "checkpoints: $out/checkpoints, metrics: $out/logs/metrics.jsonl, TensorBoard: $out/tensorboard"
