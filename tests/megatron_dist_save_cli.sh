#!/usr/bin/env bash
# tessera convert --saver megatron --ckpt-format torch_dist: a Tessera checkpoint written as Megatron-LM's torch_dist
# checkpoint (a PyTorch DCP directory: .metadata, __R_0.distcp, common.pt, metadata.json), for a GPT-2 style (tied,
# biases) and a Llama style (SwiGLU, GQA, untied) model at tensor 2 x pipeline 2, a mixture of experts at tensor 2 x
# pipeline 2 x expert 2, and one whose first layer is dense (Megatron's per-layer keys):
#  * Debian's PyTorch reads it with DCP's own FileSystemReader and load_state_dict into preallocated tensors (no
#    process group); every key equals the Tessera tensors it was made of, chunked per tensor rank, and common.pt
#    and each rank's rng_state are Megatron's (tests/megatron_dist_save_check.py);
#  * --loader megatron reads it back to the same tensors and the same debug-forward loss, bit for bit;
#  * what is not written (multi-token prediction, legacy names) and --ckpt-format without --saver megatron are
#    refused by name.
set -uo pipefail
tessera=${1:?usage: megatron_dist_save_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/checks.sh"
require_torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tokens="3,17,5,9,40,1,0,22,31,7,8,12"

base="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
      --tokenizer-type NullTokenizer --vocab-size 40 --make-vocab-size-divisible-by 8 --micro-batch-size 2
      --global-batch-size 4 --lr 1e-2 --log-interval 1 --eval-iters 0"
gpt2=""
llama="--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention --num-query-groups 2
       --kv-channels 8 --ffn-hidden-size 48 --untie-embeddings-and-output-weights --disable-bias-linear"
moe="$llama --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 16"
moe_dense_first="$moe --moe-layer-freq [0,1,1,1]"

# loss_of CKPT: the debug-forward loss, printed exactly.
loss_of() {
  "$tessera" debug-forward --load "$1" --tokens "$tokens" --out "$1.loss.safetensors" >/dev/null 2>&1 &&
    "$python" -c "import sys; sys.path.insert(0, '$here'); from hf_reference import read_safetensors
print(repr(read_safetensors('$1.loss.safetensors')['loss'].double().item()))"
}

# round_trip NAME TP PP EP [--per-layer]: trains $NAME two iterations, writes it as torch_dist, checks it in
# PyTorch, reads it back.
round_trip() {
  local name=$1 tp=$2 pp=$3 ep=$4 layout=${5:-} out a b
  out=$("$tessera" train $base ${!name} --train-iters 2 --save "$work/$name" 2>&1)
  check "$name: training: $out" $?
  out=$("$tessera" convert --loader tessera --saver megatron --ckpt-format torch_dist --load-dir "$work/$name" \
        --save-dir "$work/$name.dist" --target-tensor-parallel-size "$tp" --target-pipeline-parallel-size "$pp" \
        --target-expert-parallel-size "$ep" 2>&1)
  check "$name: convert --saver megatron --ckpt-format torch_dist: $out" $?
  out=$("$python" -W ignore "$here/megatron_dist_save_check.py" "$work/$name.dist" "$work/$name" "$tp" "$pp" "$ep" \
        $layout 2>&1)
  check "$name: PyTorch's DCP reader: $out" $?
  echo "$name: $out"
  out=$("$tessera" convert --loader megatron --load-dir "$work/$name.dist" --save-dir "$work/$name.back" 2>&1)
  check "$name: convert --loader megatron of the written checkpoint: $out" $?
  a=$(loss_of "$work/$name") b=$(loss_of "$work/$name.back")
  [ -n "$a" ] && [ "$a" = "$b" ]
  check "$name: the same debug-forward loss after the round trip: '$a' and '$b'" $?
}

round_trip gpt2 2 2 1
round_trip llama 2 2 1
round_trip moe 2 2 2
round_trip moe_dense_first 2 1 1 --per-layer

# Refusals: multi-token prediction's modules; the legacy names; --ckpt-format without --saver megatron.
out=$("$tessera" train $base --position-embedding-type rope --normalization RMSNorm --swiglu \
      --untie-embeddings-and-output-weights --disable-bias-linear --mtp-num-layers 1 --train-iters 1 --save "$work/mtp" 2>&1)
check "mtp: training: $out" $?
expect_failure "has multi-token prediction (--mtp-num-layers 1), whose modules' sharded keys are not written yet" \
  "$tessera" convert --loader tessera --saver megatron --ckpt-format torch_dist --load-dir "$work/mtp" --save-dir "$work/x1"
expect_failure "--megatron-names legacy names the legacy format's keys" \
  "$tessera" convert --loader tessera --saver megatron --ckpt-format torch_dist --megatron-names legacy \
  --load-dir "$work/gpt2" --save-dir "$work/x2"
expect_failure "--ckpt-format apply to --saver megatron only" \
  "$tessera" convert --loader tessera --saver hf --ckpt-format torch_dist --load-dir "$work/gpt2" --save-dir "$work/x3"
[ ! -e "$work/x1" ] && [ ! -e "$work/x2" ]
check "a refused conversion leaves no --save-dir" $?

finish megatron_dist_save_cli
