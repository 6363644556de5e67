#!/usr/bin/env bash
# tessera convert --loader megatron on Megatron-LM BERT checkpoints (tests/megatron_bert_fixture.py: PyTorch
# writes a pre-LN BertModel at tensor 2 x pipeline 2 as Megatron saves it: the legacy BertModel's nested
# language_model.* / lm_head.{dense,norm,bias} / binary_head keys, Megatron-Core's BertModel keys
# (encoder.layers.N, lm_head.layer_norm, output_layer.bias, pooler.dense) in bf16, and torch_dist through
# PyTorch's own DCP writer, with and without the binary head):
#  * the converted model's loss (tessera debug-forward: masked LM plus sentence order) equals a plain PyTorch
#    forward over the checkpoint's own tensors (relative 1e-5);
#  * the model is a BERT because the keys say so (Megatron's args do not), its binary head is the args';
#    pretrain_bert --load of the Megatron directory resumes it;
#  * args that disagree with the tensors (no binary head, but the tensors of one) are refused naming the key;
#  * --saver megatron: a BERT trained here, written at tensor 2 x pipeline 2 under both names, loads in torch.load
#    with the keys and shapes of Megatron's BertModel (tests/megatron_bert_save_check.py) and reads back
#    through --loader megatron to the same loss, bit for bit; so does --ckpt-format torch_dist, which PyTorch's own
#    DCP reader loads (encoder.layers.* stacked).
set -uo pipefail
tessera=${1:?usage: megatron_bert_convert_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/checks.sh"
require_torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Two samples of 10 ids, the second with 3 padding positions (as tests/hf_bert_parity.sh's).
tokens="2,17,5,9,39,3,8,0,22,31,2,7,8,12,3,30,6,0,0,0"
types="0,0,0,0,0,1,1,1,1,1,0,0,0,0,1,1,1,0,0,0"
mask="1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0,0,0"
labels="-1,4,-1,-1,11,-1,-1,27,-1,-1,-1,-1,19,-1,-1,-1,1,-1,-1,-1"
order="1,0"

# Every fixture in one Python (torch imports once).
out=$("$python" -W ignore "$here/megatron_bert_fixture.py" "$tokens" "$types" "$mask" "$labels" "$order" \
      "$work/legacy=legacy" "$work/mcore=mcore,bf16" "$work/dist=dist" "$work/nohead=dist,nohead" \
      "$work/disagree=legacy,bert_binary_head=False" 2>&1)
check "the fixtures: $out" $?

for name in legacy mcore dist nohead; do
  ref=$(grep -F "$work/$name reference loss: " <<<"$out" | sed 's/.*reference loss: //')
  log=$("$tessera" convert --loader megatron --load-dir "$work/$name" --save-dir "$work/$name.tessera" 2>&1)
  check "$name: convert: $log" $?
  bert_in=(--batch-size 2 --tokens "$tokens" --padding-mask "$mask" --labels "$labels")
  [ "$name" != nohead ] && bert_in+=(--token-types "$types" --sentence-order "$order")
  log=$("$tessera" debug-forward --load "$work/$name.tessera" "${bert_in[@]}" --out "$work/$name.out.safetensors" 2>&1)
  check "$name: debug-forward: $log" $?
  log=$("$python" -c "
import json, struct
f = open('$work/$name.out.safetensors', 'rb')
n = struct.unpack('<Q', f.read(8))[0]
begin, end = json.loads(f.read(n))['loss']['data_offsets']
f.seek(8 + n + begin)
loss, ref = struct.unpack('<f', f.read(end - begin))[0], $ref
rel = abs(loss - ref) / abs(ref)
print(f'tessera loss {loss:.9e}, PyTorch reference {ref:.9e}, relative difference {rel:.2e}')
raise SystemExit(0 if rel <= 1e-5 else 1)" 2>&1)
  check "$name: loss equals the PyTorch reference: $log" $?
  echo "$name: $log"
done
grep -q '"model_family": *"bert"' "$work/dist.tessera/iter_0000030/index.json" &&
  grep -q '"bert_binary_head": *false' "$work/nohead.tessera/iter_0000030/index.json"
check "the family (from the keys) and the binary head (from the args) are recorded" $?

# pretrain_bert --load of the Megatron directories themselves (the weights; the fixtures hold no optimizer state):
# the iteration and consumed samples carried.
for name in legacy dist; do
  log=$("$tessera" pretrain_bert --num-layers 4 --hidden-size 32 --num-attention-heads 4 --kv-channels 8 \
        --ffn-hidden-size 64 --seq-length 16 --max-position-embeddings 16 --mock-data --tokenizer-type NullTokenizer \
        --vocab-size 40 --make-vocab-size-divisible-by 8 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 \
        --log-interval 1 --eval-iters 0 --train-iters 32 --load "$work/$name" --no-load-optim 2>&1)
  [ $? -eq 0 ] && grep -qE "iteration +32/ +32 \| consumed samples: +968 \|" <<<"$log"
  check "$name: pretrain_bert --load of the Megatron BERT resumes at iteration 31 (960 samples consumed): $log" $?
done

expect_failure "tensors this model does not use: binary_head.bias (${work}/disagree/iter_0000030/mp_rank_00_001/model_optim_rng.pt), binary_head.weight" \
  "$tessera" convert --loader megatron --load-dir "$work/disagree" --save-dir "$work/x1"

bert="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16
      --mock-data --tokenizer-type NullTokenizer --vocab-size 40 --make-vocab-size-divisible-by 32
      --micro-batch-size 2 --global-batch-size 4 --lr 1e-2 --log-interval 1 --eval-iters 0"
log=$("$tessera" pretrain_bert $bert --train-iters 2 --save "$work/trained" 2>&1)
check "a BERT trains: $log" $?
bert_in=(--batch-size 2 --tokens "$tokens" --padding-mask "$mask" --labels "$labels" --token-types "$types"
         --sentence-order "$order")
loss_bits() {  # loss_bits CKPT: the debug-forward loss, exactly
  "$tessera" debug-forward --load "$1" "${bert_in[@]}" --out "$1.out.safetensors" >/dev/null 2>&1 &&
    "$python" -c "import sys; sys.path.insert(0, '$here'); from hf_reference import read_safetensors
print(repr(read_safetensors('$1.out.safetensors')['loss'].double().item()))"
}
original=$(loss_bits "$work/trained")
for names in mcore legacy; do
  log=$("$tessera" convert --loader tessera --saver megatron --load-dir "$work/trained" --save-dir "$work/saved_$names" \
        --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 --megatron-names "$names" 2>&1)
  check "$names: convert --saver megatron of a BERT: $log" $?
  log=$("$python" -W ignore "$here/megatron_bert_save_check.py" "$work/saved_$names" "$names" 2>&1)
  check "$names: torch.load of the written BERT: $log" $?
  echo "$names: $log"
  log=$("$tessera" convert --loader megatron --load-dir "$work/saved_$names" --save-dir "$work/back_$names" 2>&1)
  check "$names: convert --loader megatron of it: $log" $?
  back=$(loss_bits "$work/back_$names")
  [ -n "$original" ] && [ "$back" = "$original" ]
  check "$names: the round trip's loss is the original's: '$back' vs '$original'" $?
done
# --ckpt-format torch_dist: BertModel's sharded keys (encoder.layers.* stacked), read by PyTorch's own DCP reader
# (tests/megatron_dist_save_check.py) and back to the same loss, bit for bit.
log=$("$tessera" convert --loader tessera --saver megatron --ckpt-format torch_dist --load-dir "$work/trained" \
      --save-dir "$work/saved_dist" --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 2>&1)
check "torch_dist: convert --saver megatron of a BERT: $log" $?
log=$("$python" -W ignore "$here/megatron_dist_save_check.py" "$work/saved_dist" "$work/trained" 2 2 1 2>&1)
check "torch_dist: PyTorch's DCP reader on the written BERT: $log" $?
echo "torch_dist: $log"
log=$("$tessera" convert --loader megatron --load-dir "$work/saved_dist" --save-dir "$work/back_dist" 2>&1)
check "torch_dist: convert --loader megatron of it: $log" $?
back=$(loss_bits "$work/back_dist")
[ -n "$original" ] && [ "$back" = "$original" ]
check "torch_dist: the round trip's loss is the original's: '$back' vs '$original'" $?

finish megatron_bert_convert_cli
