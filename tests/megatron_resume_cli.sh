#!/usr/bin/env bash
# tessera train --load of a Megatron-LM checkpoint directory itself (legacy torch and torch_dist), with Adam's
# state: a Llama-style model trained 3 iterations by Tessera is written by PyTorch as Megatron's tensor 2 x
# pipeline 2 ranks write it (tests/megatron_resume_fixture.py: the moments numbered as Megatron's optimizer
# numbers them, or as optimizer.state.exp_avg.<key> DCP entries; bf16 weights with fp32 masters), and
#  * resuming it gives the losses of Tessera resuming its own checkpoint (the weights, moments and step
#    count carried), at tp 1 and, under mpirun, tp 2; also from an interleaved pipeline's files (two model
#    chunks per stage, model0 and model1, the optimizer numbering both chunks' parameters in turn);
#  * the iteration and consumed samples are carried;
#  * no optimizer state, moments numbered in another order, the legacy distributed optimizer's distrib_optim.pt,
#    torch_dist's dp_reshardable buckets and flags that disagree with the saved args are refused naming the
#    file and key or flag; --no-load-optim resumes the weights alone.
set -uo pipefail
tessera=${1:?usage: megatron_resume_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/checks.sh"
require_torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

llama="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --kv-channels 8 --group-query-attention
       --num-query-groups 2 --ffn-hidden-size 48 --swiglu --position-embedding-type rope --normalization RMSNorm
       --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 16 --max-position-embeddings 16
       --hidden-dropout 0 --attention-dropout 0 --mock-data --tokenizer-type NullTokenizer --vocab-size 40
       --make-vocab-size-divisible-by 8 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1
       --eval-iters 0"
losses() { sed -nE 's/.*iteration +([0-9]+)\/.*lm loss: ([^ ]+) .*/\1:\2/p' <<<"$1" | tr '\n' ' '; }

out=$("$tessera" train $llama --train-iters 3 --save "$work/tessera" --save-interval 3 2>&1)
check "Tessera's run saves at iteration 3: $out" $?
out=$("$python" -W ignore "$here/megatron_resume_fixture.py" "$work/tessera" "$work/legacy=torch" \
      "$work/legacy_bf16=torch,bf16" "$work/dist_bf16=torch_dist,bf16" "$work/no_optim=torch,no-optim" \
      "$work/misnumbered=torch,misnumbered" "$work/distrib=torch,distrib-optim" \
      "$work/buckets=torch_dist,dp-reshardable" "$work/legacy_vp2=torch,vp2" "$work/legacy_vp2_bf16=torch,bf16,vp2" 2>&1)
check "the fixtures: $out" $?

# The reference: Tessera resuming its own checkpoint.
ref=$("$tessera" train $llama --train-iters 6 --load "$work/tessera" 2>&1)
check "Tessera resumes its own checkpoint: $ref" $?
expected=$(losses "$ref")
[ "$(wc -w <<<"$expected")" -eq 3 ]
check "three resumed iterations: $expected" $?
for name in legacy legacy_bf16 dist_bf16 legacy_vp2 legacy_vp2_bf16; do
  out=$("$tessera" train $llama --train-iters 6 --load "$work/$name" 2>&1)
  check "$name: train --load of the Megatron directory: $out" $?
  [ "$(losses "$out")" = "$expected" ]
  check "$name: the losses of Tessera's own resume: $(losses "$out") vs $expected" $?
  grep -qF "loaded checkpoint from $work/$name at iteration 3" <<<"$out"
  check "$name: resumed at Megatron's iteration: $out" $?
done
grep -q '"consumed_train_samples": *12' "$work/tessera/iter_0000003/index.json" &&
  "$tessera" train $llama --train-iters 4 --load "$work/legacy" --save "$work/resaved" --save-interval 4 >/dev/null 2>&1 &&
  grep -q '"consumed_train_samples": *16' "$work/resaved/iter_0000004/index.json"
check "the consumed samples are carried (12, then 16 after one more iteration)" $?

# Tensor-parallel size 2: the Megatron checkpoint resharded as Tessera's own is.
if command -v mpirun >/dev/null; then
  mpi="mpirun --oversubscribe --allow-run-as-root -np 2"
  export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
  ref2=$($mpi "$tessera" train $llama --tensor-model-parallel-size 2 --train-iters 5 --load "$work/tessera" 2>&1)
  check "Tessera's own resume at tp 2: $ref2" $?
  out=$($mpi "$tessera" train $llama --tensor-model-parallel-size 2 --train-iters 5 --load "$work/dist_bf16" 2>&1)
  check "torch_dist resume at tp 2: $out" $?
  [ -n "$(losses "$ref2")" ] && [ "$(losses "$out")" = "$(losses "$ref2")" ]
  check "tp 2: the losses of Tessera's own resume: $(losses "$out") vs $(losses "$ref2")" $?
fi

# Refusals, naming the file or flag; --no-load-optim takes the weights alone.
expect_failure "mp_rank_00_000/model_optim_rng.pt: has no optimizer state (saved with --no-save-optim?)" \
  "$tessera" train $llama --train-iters 4 --load "$work/no_optim"
out=$("$tessera" train $llama --train-iters 4 --load "$work/no_optim" --no-load-optim 2>&1)
[ $? -eq 0 ] && grep -qF "iteration        4/       4 |" <<<"$out"
check "--no-load-optim resumes the weights alone: $out" $?
expect_failure "mp_rank_00_000/model_optim_rng.pt: optimizer.state[0].exp_avg has shape [32, 32] but the parameter it stands for in Megatron's order (embedding.word_embeddings.weight) is [24, 32]" \
  "$tessera" train $llama --train-iters 4 --load "$work/misnumbered"
expect_failure "mp_rank_00_000/distrib_optim.pt: the distributed optimizer's flat buffers (args.use_distributed_optimizer) are not read: resume with --no-load-optim" \
  "$tessera" train $llama --train-iters 4 --load "$work/distrib"
out=$("$tessera" train $llama --train-iters 4 --load "$work/distrib" --no-load-optim 2>&1)
[ $? -eq 0 ] && grep -qF "iteration        4/       4 |" <<<"$out"
check "--no-load-optim resumes the legacy distributed optimizer's checkpoint: $out" $?
expect_failure "iter_0000003/.metadata: optimizer.distributed.dp_group_idx_0/shard_0_4 holds the distributed optimizer's state in its dp_reshardable buckets, which are not read" \
  "$tessera" train $llama --train-iters 4 --load "$work/buckets"
expect_failure "--ffn-hidden-size" "$tessera" train ${llama/--ffn-hidden-size 48/--ffn-hidden-size 64} --train-iters 4 \
  --load "$work/legacy"

finish megatron_resume_cli
