#!/usr/bin/env bash
# Megatron-LM torch_dist checkpoints of DeepSeek-V3-style models read by Tessera: a model with multi-latent attention
# (with --q-lora-rank, and without: linear_q_proj), a dense first layer, sigmoid group-limited routing with expert
# bias, a shared expert and one multi-token prediction module, trained one iteration by Tessera and written by
# PyTorch's own DCP writer as a tensor 2 x pipeline 2 Megatron-Core job writes it (tests/megatron_deepseek_dist_fixture.py:
# per-layer keys, the experts on an axis, the MTP module's layer under mtp.layers.0.transformer_layer.*, Transformer
# Engine's fused norms, Adam's moments per parameter):
#  * convert --loader megatron gives Tessera's own debug-forward loss (the MTP objective included), bit for bit;
#  * train --load of the directory resumes it: the next two iterations' lm and mtp losses and consumed samples are
#    those of Tessera resuming its own checkpoint (weights, expert bias, moments, step count all carried).
set -uo pipefail
tessera=${1:?usage: megatron_deepseek_dist_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/checks.sh"
require_torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tokens="3,17,5,9,40,1,0,22,31,7,8,12,2"

source "$here/lib/deepseek_toy.sh"
common="$deepseek_toy"
qlora="$common --q-lora-rank 24"
noqlora="$common"

loss_of() {  # loss_of CKPT: the debug-forward loss, printed exactly
  "$tessera" debug-forward --load "$1" --tokens "$tokens" --out "$1.loss.safetensors" >/dev/null 2>&1 &&
    "$python" -c "import sys; sys.path.insert(0, '$here'); from hf_reference import read_safetensors
print(repr(read_safetensors('$1.loss.safetensors')['loss'].double().item()))"
}
# iteration:consumed samples:lm loss:mtp loss of each logged iteration.
losses() { sed -nE 's/.*iteration +([0-9]+)\/.*consumed samples: +([0-9]+).*lm loss: ([^ ]+) .*mtp_1 loss: ([^ ]+) .*/\1:\2:\3:\4/p' <<<"$1" | tr '\n' ' '; }

for name in qlora noqlora; do
  out=$("$tessera" train ${!name} --train-iters 1 --save "$work/$name" --save-interval 1 2>&1)
  check "$name: Tessera trains and saves: $out" $?
  out=$("$python" -W ignore "$here/megatron_deepseek_dist_fixture.py" "$work/$name" "$work/$name.megatron" 2>&1)
  check "$name: the torch_dist fixture (PyTorch's DCP writer): $out" $?
  grep -q "mtp.layers.0.transformer_layer.mlp.experts.experts.linear_fc1.weight" <<<"$out"
  check "$name: the fixture writes the MTP layer's experts on their axis: $out" $?
  out=$("$tessera" convert --loader megatron --load-dir "$work/$name.megatron" --save-dir "$work/$name.back" 2>&1)
  check "$name: convert --loader megatron: $out" $?
  a=$(loss_of "$work/$name") b=$(loss_of "$work/$name.back")
  [ -n "$a" ] && [ "$a" = "$b" ]
  check "$name: the converted loss equals Tessera's own: '$a' and '$b'" $?
  ref=$("$tessera" train ${!name} --train-iters 3 --load "$work/$name" 2>&1)
  check "$name: Tessera resumes its own checkpoint: $ref" $?
  out=$("$tessera" train ${!name} --train-iters 3 --load "$work/$name.megatron" 2>&1)
  check "$name: train --load of the torch_dist directory: $out" $?
  [ -n "$(losses "$ref")" ] && [ "$(losses "$out")" = "$(losses "$ref")" ]
  check "$name: the resumed losses (iteration:consumed samples:lm:mtp) are Tessera's own: $(losses "$out") vs $(losses "$ref")" $?
  echo "$name: debug-forward loss $a; resumed iterations (iteration:consumed samples:lm:mtp) $(losses "$out")"
done
grep -q '"q_lora_rank": *0' "$work/noqlora.back/iter_0000001/index.json" &&
  grep -q '"q_lora_rank": *24' "$work/qlora.back/iter_0000001/index.json"
check "the query compression comes from the saved args: $(grep -o '"q_lora_rank": *[0-9]*' "$work"/*.back/iter_0000001/index.json)" $?

finish megatron_deepseek_dist_cli
