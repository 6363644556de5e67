#!/usr/bin/env bash
# Megatron-LM's example launch scripts (examples/mixtral, gpt3, llama, bert at its HEAD) carry over: their
# training flags, with the model shrunk to a few layers and mock data, train one iteration with `tessera
# train` (the flags without effect here named at start-up), and a flag for a feature Tessera does not have
# stops the run naming it and why, never as an unknown flag. The counted pipeline split and
# --encoder-seq-length run as a script gives them.
set -uo pipefail
tessera=${1:?usage: megatron_example_flags_cli.sh path/to/tessera}
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpirun="mpirun --oversubscribe --allow-run-as-root"

small="--num-layers 2 --hidden-size 32 --ffn-hidden-size 64 --num-attention-heads 4 --max-position-embeddings 32
       --mock-data --tokenizer-type NullTokenizer --vocab-size 63 --micro-batch-size 1 --global-batch-size 2
       --train-iters 1 --log-interval 1 --eval-iters 0 --lr 1e-4"

# examples/mixtral/train_mixtral_8x7b_distributed.sh's model, MoE and training flags (--no-position-embedding
# beside RoPE), at pp 1 and ep 1.
mixtral="--use-mcore-models --disable-bias-linear --seq-length 16 --init-method-std 0.01 --attention-dropout 0.0
         --hidden-dropout 0.0 --normalization RMSNorm --position-embedding-type rope --swiglu
         --untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2
         --no-masked-softmax-fusion --no-position-embedding --rotary-base 1000000 --num-experts 4
         --moe-router-topk 2 --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 1e-2 --moe-grouped-gemm
         --moe-token-dispatcher-type alltoall --lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 0.1
         --clip-grad 1.0 --bf16 --use-distributed-optimizer"
out=$("$tessera" train $mixtral $small 2>&1)
check "mixtral's flags train: $out" $?
grep -q "Megatron flags accepted with no effect here" <<<"$out"
check "mixtral: the flags without effect are named: $out" $?

# examples/gpt3's (--attention-backend) and llama's switches without effect here (fusions, GC, the data
# loader's, the Nsight hooks, W&B, --tiktoken-pattern with the NullTokenizer, --calculate-per-token-loss: Tessera's
# objective is always the mean over the global batch's loss tokens).
switches="--attention-backend auto --cross-entropy-loss-fusion --manual-gc --empty-unused-memory-level 1
          --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1 --profile
          --profile-step-start 4 --profile-step-end 6 --log-throughput --tiktoken-pattern v2 --wandb-project p
          --wandb-exp-name e --calculate-per-token-loss"
out=$("$tessera" train $small --seq-length 16 $switches 2>&1)
check "gpt3 and llama switches train: $out" $?
for flag in --attention-backend --cross-entropy-loss-fusion --profile-step-start --tiktoken-pattern --wandb-project \
  --calculate-per-token-loss; do
  grep -q -- "     $flag" <<<"$out"
  check "$flag named at start-up: $(grep -A20 'no effect here' <<<"$out")" $?
done

# llama's FP8, decoupled learning rate and the rest: refused by name, with the reason.
expect_failure "--fp8-format=hybrid: FP8 training is not built" "$tessera" train $small --seq-length 16 --fp8-format hybrid
expect_failure "--decoupled-lr=5.0e-4: a separate learning rate for the embedding and the output layer is not built" \
  "$tessera" train $small --seq-length 16 --decoupled-lr 5.0e-4
# The gpt3 example gives both a step schedule and --global-batch-size, which Megatron HEAD rejects too.
expect_failure "--global-batch-size=2: cannot be combined with --step-batch-size-schedule" \
  "$tessera" train $small --seq-length 16 --step-batch-size-schedule "0:16 2.4B:320"

# --encoder-seq-length as a script gives it (no --seq-length), and against a different --seq-length.
out=$("$tessera" train $small --encoder-seq-length 16 2>&1)
check "--encoder-seq-length alone is the sequence length: $out" $?
expect_failure "--encoder-seq-length=32: must equal --seq-length=16" "$tessera" train $small --seq-length 16 \
  --encoder-seq-length 32

# The counted split at pp 2 (2 layers + the embedding + the loss over 2 stages: 1 layer each) and
# --cp-comm-type p2p at cp 2.
out=$($mpirun -np 2 "$tessera" train $small --seq-length 16 --pipeline-model-parallel-size 2 \
  --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split 2>&1)
check "counted split at pp 2: $out" $?
grep -qF "layers per pipeline stage: 1 1 (the embedding and/or the loss counted" <<<"$out"
check "the counted split is said at start-up: $(grep 'layers per' <<<"$out")" $?
out=$($mpirun -np 2 "$tessera" train $small --seq-length 16 --context-parallel-size 2 --cp-comm-type p2p 2>&1)
check "--cp-comm-type p2p at cp 2: $out" $?
expect_failure "--cp-comm-type=a2a: cannot be used with --context-parallel-size=2" \
  $mpirun -np 2 "$tessera" train $small --seq-length 16 --context-parallel-size 2 --cp-comm-type a2a
finish megatron_example_flags_cli
