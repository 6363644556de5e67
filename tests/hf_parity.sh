#!/usr/bin/env bash
# Hugging Face interchange, end to end, for a GPT-2 style and a Llama style model:
#  * tessera convert to HF and back is bit-exact (the weights by name, and a second export byte for byte),
#    with one file and with sharded files + model.safetensors.index.json;
#  * the exported model run by an independent PyTorch implementation (tests/hf_reference.py, float64)
#    gives Tessera's logits, loss and weight gradients on the same tokens (relative 1e-5);
#  * tessera train --load of the imported checkpoint finetunes (a different tensor-parallel size too).
set -uo pipefail
tessera=${1:?usage: hf_parity.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3  # Debian's python3-torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
# Same-named tensors of two safetensors files (or directories of them) are bit-identical.
same_tensors() {
  "$python" - "$here" "$1" "$2" <<'PY'
import sys
import torch
sys.path.insert(0, sys.argv[1])
from hf_reference import read_safetensors
a, b = read_safetensors(sys.argv[2]), read_safetensors(sys.argv[3])
names = [k for k in a if k in b]
def bits(t):
    return t.reshape(-1).view(torch.int32)
bad = [k for k in names if a[k].shape != b[k].shape or not bool((bits(a[k]) == bits(b[k])).all())]
missing = sorted(set(a) ^ set(b))
print(f"{len(names)} tensors compared, {len(bad)} differ {bad}, only in one file: {missing}")
sys.exit(1 if bad or missing else 0)
PY
}

base="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
      --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-2
      --log-interval 1 --eval-iters 0"
gpt2=""
llama="--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention
       --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
tokens="3,17,5,9,40,1,0,22,31,7,8,12"

for family in gpt2 llama; do
  flags="$base ${!family}"
  dir=$work/$family
  # A few steps of training, so biases and norms are no longer at their initial values.
  out=$("$tessera" train $flags --train-iters 3 --save "$dir/ckpt" 2>&1)
  check "$family: training for the export: $out" $?

  out=$("$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/hf" 2>&1)
  check "$family: export: $out" $?
  [ -f "$dir/hf/config.json" ] && [ -f "$dir/hf/model.safetensors" ]
  check "$family: export writes config.json and model.safetensors" $?
  want=GPT2LMHeadModel
  [ "$family" = llama ] && want=LlamaForCausalLM
  grep -qF "\"$want\"" "$dir/hf/config.json"
  check "$family: config.json names $want" $?

  # Round trip: HF -> Tessera gives the original weights bit for bit, and exports to the same bytes.
  out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/hf" --save-dir "$dir/back" 2>&1)
  check "$family: import: $out" $?
  out=$(same_tensors "$dir/ckpt/iter_0000003/model.tp00.pp00.safetensors" "$dir/back/iter_0000000/model.tp00.pp00.safetensors" 2>&1)
  check "$family: Tessera -> HF -> Tessera is bit-exact: $out" $?
  "$tessera" convert --loader tessera --saver hf --load-dir "$dir/back" --save-dir "$dir/hf2" >/dev/null 2>&1 &&
    cmp -s "$dir/hf/model.safetensors" "$dir/hf2/model.safetensors"
  check "$family: a second export is byte-identical" $?

  # A config.json whose vocab_size disagrees with the weights is refused (the rows that fit were imported).
  mkdir -p "$dir/edited" && cp "$dir/hf/model.safetensors" "$dir/edited/" &&
    "$python" -c 'import json, sys; c = json.load(open(sys.argv[1])); c.pop("tessera_args"); c["vocab_size"] = 10
json.dump(c, open(sys.argv[2], "w"))' "$dir/hf/config.json" "$dir/edited/config.json"
  out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/edited" --save-dir "$dir/edited_back" 2>&1)
  [ $? -ne 0 ] && grep -qF "gives embedding.word_embeddings.weight the shape [10, 32] but the Hugging Face tensor has" <<<"$out"
  check "$family: an edited vocab_size is refused: $out" $?
  # An edited field beside tessera_args is refused too (the recorded run overrode it silently).
  "$python" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["n_layer" if "n_layer" in c else "num_hidden_layers"] = 1
json.dump(c, open(sys.argv[2], "w"))' "$dir/hf/config.json" "$dir/edited/config.json"
  out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/edited" --save-dir "$dir/edited_back" 2>&1)
  [ $? -ne 0 ] && grep -qF "its fields give 1 layers but its tessera_args 2" <<<"$out"
  check "$family: a layer count edited beside tessera_args is refused: $out" $?

  # Sharded export: several files and an index; importing them gives the same weights again.
  out=$("$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/sharded" --max-shard-size 20KB 2>&1)
  check "$family: sharded export: $out" $?
  shards=$(ls "$dir/sharded"/model-*-of-*.safetensors 2>/dev/null | wc -l)
  [ "$shards" -gt 1 ] && [ -f "$dir/sharded/model.safetensors.index.json" ] && [ ! -f "$dir/sharded/model.safetensors" ]
  check "$family: sharded export has $shards files and an index" $?
  "$tessera" convert --loader hf --saver tessera --load-dir "$dir/sharded" --save-dir "$dir/back_sharded" >/dev/null 2>&1 &&
    same_tensors "$dir/back/iter_0000000/model.tp00.pp00.safetensors" "$dir/back_sharded/iter_0000000/model.tp00.pp00.safetensors" >/dev/null
  check "$family: importing the sharded export gives the same weights" $?
  # transformers' other size spellings: binary units, any case (5GiB, 20kib) were refused.
  "$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/kib" --max-shard-size 20kib \
    >/dev/null 2>&1 && [ "$(ls "$dir/kib"/model-*-of-*.safetensors | wc -l)" -gt 1 ]
  check "$family: --max-shard-size 20kib shards the export" $?
  # Exporting over it as one file removes the earlier shards and index (a stale index was read first).
  "$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/sharded" >/dev/null 2>&1 &&
    [ "$(ls "$dir/sharded" | tr '\n' ' ')" = "config.json model.safetensors " ] &&
    cmp -s "$dir/hf/model.safetensors" "$dir/sharded/model.safetensors"
  check "$family: an export over a sharded one leaves only its own files: $(ls "$dir/sharded" | head -4)" $?

  # Parity with the PyTorch reference on the same tokens.
  out=$("$tessera" debug-forward --load "$dir/ckpt" --tokens "$tokens" --out "$dir/tessera_out.safetensors" 2>&1)
  check "$family: debug-forward: $out" $?
  out=$("$python" "$here/hf_reference.py" "$dir/hf" "$dir/tessera_out.safetensors" "$tokens" 1e-5 2>&1)
  check "$family: parity with the PyTorch reference: $out" $?
  echo "$out" | tail -1

  # Finetuning the imported model: iteration 0, then training continues, at tp1 and under mpirun at tp2.
  out=$("$tessera" train $flags --train-iters 2 --load "$dir/back" --finetune 2>&1)
  check "$family: finetune from the import exits 0: $out" $?
  grep -q "loaded checkpoint from $dir/back at iteration 0 (finetune" <<<"$out" && grep -qF "iteration        2/       2 |" <<<"$out"
  check "$family: finetune loads the import and trains: $out" $?
  if command -v mpirun >/dev/null; then
    out=$(OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 \
          "$tessera" train $flags --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --train-iters 2 \
          --load "$dir/back" --finetune 2>&1)
    check "$family: finetune at tp2 with another vocabulary padding: $out" $?
  fi
done

finish hf_parity
