#!/usr/bin/env bash
# tessera convert --saver megatron --ckpt-format torch_dist: a Tessera checkpoint written as Megatron-LM's torch_dist
# checkpoint (a PyTorch DCP directory: .metadata, __R_0.distcp, common.pt, metadata.json), for a GPT-2 style (tied,
# biases) and a Llama style (SwiGLU, GQA, untied) model at tensor 2 x pipeline 2, a mixture of experts at tensor 2 x
# pipeline 2 x expert 2 (every layer MoE: moe_layer_freq 1, layers stacked), one with MoE every other layer
# (moe_layer_freq 2) and one whose first layer is dense (a moe_layer_freq list): Megatron-Core's per-layer keys:
#  * Debian's PyTorch reads it with DCP's own FileSystemReader and load_state_dict into preallocated tensors (no
#    process group); every key equals the Tessera tensors it was made of, chunked per tensor rank, and common.pt
#    and each rank's rng_state are Megatron's (tests/megatron_dist_save_check.py);
#  * --loader megatron reads it back to the same tensors and the same debug-forward loss, bit for bit;
#  * DeepSeek-V3-style models (multi-latent attention with and without --q-lora-rank, group-limited sigmoid routing
#    with expert bias, a dense first layer, a multi-token prediction module: mtp.layers.0.transformer_layer.* unstacked,
#    its experts on an axis) round-trip the same way at tensor 2 x pipeline 2 x expert 2, and train --load of the
#    written directory trains on to Tessera's own losses;
#  * what is not written (legacy names) and --ckpt-format without --saver megatron are refused by name.
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
moe_every_other="$moe --moe-layer-freq 2"
# DeepSeek-V3 style: multi-latent attention (with and without --q-lora-rank), sigmoid group-limited routing with
# expert bias, a shared expert, a dense first layer and one multi-token prediction module, whose layer is MoE.
deepseek="--position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights
          --disable-bias-linear --qk-layernorm --multi-latent-attention --kv-lora-rank 16 --qk-head-dim 8
          --qk-pos-emb-head-dim 8 --v-head-dim 12 --num-experts 4 --moe-router-topk 2 --moe-router-score-function sigmoid
          --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2 --moe-router-num-groups 2
          --moe-router-group-topk 1 --moe-ffn-hidden-size 8 --moe-shared-expert-intermediate-size 16
          --moe-layer-freq [0,1,1,1] --moe-router-load-balancing-type none --mtp-num-layers 1 --ffn-hidden-size 48
          --hidden-dropout 0 --attention-dropout 0"
deepseek_qlora="$deepseek --q-lora-rank 24"

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
round_trip moe_every_other 2 2 2 --per-layer
round_trip deepseek 2 2 2 --per-layer
round_trip deepseek_qlora 2 2 2 --per-layer

# train --load of the written DeepSeek-V3-style directory (no optimizer state: --no-load-optim) trains on as Tessera
# does from its own checkpoint's weights: the same lm and MTP losses.
losses() { sed -nE 's/.*iteration +([0-9]+)\/.*lm loss: ([^ ]+) .*mtp_1 loss: ([^ ]+) .*/\1:\2:\3/p' <<<"$1" | tr '\n' ' '; }
ref=$("$tessera" train $base $deepseek_qlora --train-iters 4 --load "$work/deepseek_qlora" --no-load-optim 2>&1)
check "deepseek_qlora: Tessera trains on from its own weights: $ref" $?
out=$("$tessera" train $base $deepseek_qlora --train-iters 4 --load "$work/deepseek_qlora.dist" --no-load-optim 2>&1)
check "deepseek_qlora: train --load of the torch_dist directory: $out" $?
[ -n "$(losses "$ref")" ] && [ "$(losses "$out")" = "$(losses "$ref")" ]
check "deepseek_qlora: the losses (iteration:lm:mtp) after train --load are Tessera's own: $(losses "$out") vs $(losses "$ref")" $?

# Refusals: the legacy names; --ckpt-format without --saver megatron.
expect_failure "--megatron-names legacy names the legacy format's keys" \
  "$tessera" convert --loader tessera --saver megatron --ckpt-format torch_dist --megatron-names legacy \
  --load-dir "$work/gpt2" --save-dir "$work/x2"
expect_failure "--ckpt-format apply to --saver megatron only" \
  "$tessera" convert --loader tessera --saver hf --ckpt-format torch_dist --load-dir "$work/gpt2" --save-dir "$work/x3"
[ ! -e "$work/x2" ]
check "a refused conversion leaves no --save-dir" $?

finish megatron_dist_save_cli
