#!/usr/bin/env bash
# tessera convert --saver megatron: a Tessera checkpoint written as Megatron-LM's legacy checkpoint
# (iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt), for a GPT-2 style and a Llama style (GQA, SwiGLU, RoPE,
# untied) model trained here, at tensor 2 x pipeline 2 and 1 x 1, under Megatron-Core's and the legacy names:
#  * PyTorch's torch.load (Debian's python3-torch) reads every rank's file; its keys, shapes and dtypes are
#    those Megatron's GPTModel has for the saved args, and the shards merged back as Megatron's converters
#    merge them equal the Tessera tensors (tests/megatron_save_check.py); a --bf16 run is stored as bf16;
#    each rank's rng_state is what Python, numpy and PyTorch give after Megatron's seeding of that rank, and
#    random.setstate, np.random.set_state and torch.set_rng_state take it (tests/megatron_rng_check.py);
#  * --saver megatron then --loader megatron gives the same tensors bit for bit and the same debug-forward loss;
#  * a layout the model does not divide into and a non-GPT loader are refused by name.
set -uo pipefail
tessera=${1:?usage: megatron_save_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3  # Debian's python3-torch
source "$here/lib/checks.sh"
"$python" -c 'import torch' >/dev/null 2>&1 || skip "$python cannot import torch (Debian's python3-torch)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tokens="3,17,5,9,40,1,0,22,31,7,8,12"

# Four layers (two per stage), a vocabulary of 41 padded to 64 at tp 1 and tp 2 alike (32 x tp), so the
# round trip keeps the padding rows.
base="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
      --tokenizer-type NullTokenizer --vocab-size 40 --make-vocab-size-divisible-by 32 --micro-batch-size 2
      --global-batch-size 4 --lr 1e-2 --log-interval 1 --eval-iters 0"
gpt2=""
llama="--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention --num-query-groups 2
       --kv-channels 8 --ffn-hidden-size 48 --untie-embeddings-and-output-weights --disable-bias-linear"

# save_check NAME FAMILY TP PP DTYPE NAMES: converts $work/FAMILY/ckpt and checks it in PyTorch.
save_check() {
  local name=$1 family=$2 tp=$3 pp=$4 dtype=$5 names=$6 out
  out=$("$tessera" convert --loader tessera --saver megatron --load-dir "$work/$family/ckpt" \
        --save-dir "$work/$name" --target-tensor-parallel-size "$tp" --target-pipeline-parallel-size "$pp" \
        --megatron-names "$names" 2>&1)
  check "$name: convert --saver megatron: $out" $?
  out=$("$python" -W ignore "$here/megatron_save_check.py" "$work/$name" \
        "$work/$family/ckpt/iter_0000003/model.tp00.pp00.safetensors" "$tp" "$pp" "$dtype" "$names" 2>&1)
  check "$name: torch.load and the shards: $out" $?
  echo "$name: $out"
}

# same_tensors A B: the two safetensors files hold the same tensors, bit for bit.
same_tensors() {
  "$python" - "$here" "$1" "$2" <<'PY'
import sys
import torch
sys.path.insert(0, sys.argv[1])
from hf_reference import read_safetensors
a, b = read_safetensors(sys.argv[2]), read_safetensors(sys.argv[3])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for k in a:
    assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
print(len(a), "tensors equal")
PY
}

loss_of() {  # loss_of CKPT OUT: the debug-forward loss's bits
  "$tessera" debug-forward --load "$1" --tokens "$tokens" --out "$2" >/dev/null 2>&1 &&
    "$python" -c "import sys; sys.path.insert(0, '$here'); from hf_reference import read_safetensors; print(read_safetensors('$2')['loss'].double().item())"
}

for family in gpt2 llama; do
  out=$("$tessera" train $base ${!family} --train-iters 3 --save "$work/$family/ckpt" 2>&1)
  check "$family: training: $out" $?
  save_check "${family}_tp2pp2" "$family" 2 2 float32 mcore
  save_check "${family}_tp1pp1" "$family" 1 1 float32 mcore

  # Round trip: Megatron's layout read back by --loader megatron is the original, bit for bit.
  out=$("$tessera" convert --loader megatron --load-dir "$work/${family}_tp2pp2" --save-dir "$work/${family}_back" 2>&1)
  check "$family: convert --loader megatron of the tp2pp2 checkpoint: $out" $?
  # The written rng_state reads back as the run's seed (Tessera trains with 1234 by default), without a note.
  ! grep -qF "rng_state" <<<"$out" && grep -q '"seed": *1234' "$work/${family}_back/iter_0000003/index.json"
  check "$family: the rng_state's seed reads back as 1234 without a note: $out" $?
  out=$(same_tensors "$work/$family/ckpt/iter_0000003/model.tp00.pp00.safetensors" \
        "$work/${family}_back/iter_0000003/model.tp00.pp00.safetensors" 2>&1)
  check "$family: the round trip keeps every tensor: $out" $?
  a=$(loss_of "$work/$family/ckpt" "$work/$family/loss.safetensors")
  b=$(loss_of "$work/${family}_back" "$work/${family}_back/loss.safetensors")
  [ -n "$a" ] && [ "$a" = "$b" ]
  check "$family: the same debug-forward loss after the round trip: '$a' and '$b'" $?
  echo "$family: round trip: $out; loss $a and $b"
done

# The legacy language_model.* names, at tp2 x pp2 (the tied copy is word_embeddings_for_head), and back.
save_check gpt2_legacy gpt2 2 2 float32 legacy
save_check llama_legacy llama 2 2 float32 legacy
out=$("$tessera" convert --loader megatron --load-dir "$work/gpt2_legacy" --save-dir "$work/gpt2_legacy_back" 2>&1)
check "the legacy names convert back: $out" $?
out=$(same_tensors "$work/gpt2/ckpt/iter_0000003/model.tp00.pp00.safetensors" \
      "$work/gpt2_legacy_back/iter_0000003/model.tp00.pp00.safetensors" 2>&1)
check "the legacy names' round trip keeps every tensor: $out" $?

# A --bf16 run's weights are stored as bf16, as Megatron's parameters are.
out=$("$tessera" train $base --bf16 --train-iters 3 --save "$work/bf16/ckpt" 2>&1)
check "bf16: training: $out" $?
save_check bf16_tp2pp1 bf16 2 1 bfloat16 mcore

# Refusals: a layout the model does not divide into; a non-Tessera loader.
expect_failure "num_layers (4) is not divisible by --target-pipeline-parallel-size 3" \
  "$tessera" convert --loader tessera --saver megatron --load-dir "$work/gpt2/ckpt" --save-dir "$work/x1" \
  --target-pipeline-parallel-size 3
expect_failure "num_query_groups (2) is not divisible by --target-tensor-parallel-size 4" \
  "$tessera" convert --loader tessera --saver megatron --load-dir "$work/llama/ckpt" --save-dir "$work/x2" \
  --target-tensor-parallel-size 4
expect_failure "apply to --saver megatron only" \
  "$tessera" convert --loader tessera --saver hf --load-dir "$work/gpt2/ckpt" --save-dir "$work/x3" \
  --target-tensor-parallel-size 2
expect_failure "apply to --saver megatron only" \
  "$tessera" convert --loader megatron --load-dir "$work/gpt2_tp2pp2" --save-dir "$work/x4" \
  --target-pipeline-parallel-size 2
[ ! -e "$work/x1" ] && [ ! -e "$work/x2" ]
check "a refused conversion leaves no --save-dir" $?

finish megatron_save_cli
