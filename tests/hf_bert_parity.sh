#!/usr/bin/env bash
# Hugging Face interchange for BERT, end to end, for the four layouts: post-LN (BertForPreTraining, and
# BertForMaskedLM without the binary head) and pre-LN (MegatronBertForPreTraining, MegatronBertForMaskedLM):
#  * a tiny BERT trained a few iterations on mock data exports with the right architecture;
#  * an independent PyTorch implementation of the HF architecture (tests/hf_bert_reference.py, float64)
#    run on the exported weights gives Tessera's MLM logits, sentence-order logits, loss and every weight
#    gradient on the same padded batch (relative 1e-5);
#  * HF -> Tessera gives the original checkpoint bit for bit, with and without "tessera_args" (a plain HF
#    config.json), and a second export is byte-identical;
#  * an architecture that is not the recorded run's layout, an untied decoder, and on export a BERT
#    with RMSNorm are refused;
#  * tessera pretrain_bert --load of the import finetunes.
set -uo pipefail
tessera=${1:?usage: hf_bert_parity.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3  # Debian's python3-torch
source "$here/lib/checks.sh"
[ -x "$python" ] || skip "no $python"
"$python" -c "import torch" 2>/dev/null || skip "$python has no torch (Debian's python3-torch)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

same_tensors() {  # same-named tensors of two safetensors files are bit-identical, and the names agree
  "$python" - "$here" "$1" "$2" <<'PY'
import sys
import torch
sys.path.insert(0, sys.argv[1])
from hf_reference import read_safetensors
a, b = read_safetensors(sys.argv[2]), read_safetensors(sys.argv[3])
names = [k for k in a if k in b]
bad = [k for k in names if a[k].shape != b[k].shape or
       not bool((a[k].reshape(-1).view(torch.int32) == b[k].reshape(-1).view(torch.int32)).all())]
missing = sorted(set(a) ^ set(b))
print(f"{len(names)} tensors compared, {len(bad)} differ {bad}, only in one file: {missing}")
sys.exit(1 if bad or missing else 0)
PY
}
edit_json() {  # edit_json FILE PYTHON-EXPRESSION-ON-c
  "$python" - "$1" "$2" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    c = json.load(f)
exec(sys.argv[2])
with open(sys.argv[1], "w") as f:
    json.dump(c, f, indent=2)
PY
}

base="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16
      --mock-data --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4
      --lr 1e-2 --log-interval 1 --eval-iters 0 --norm-epsilon 1e-5"
post_head="--apply-residual-connection-post-layernorm"
post_nohead="--apply-residual-connection-post-layernorm --bert-no-binary-head"
pre_head=""
pre_nohead="--bert-no-binary-head"
# Two samples of 10 ids: the second has 3 padding positions (the padded query rows still attend to the
# valid keys, in HF and in Tessera, so their logits are compared too).
tokens="2,17,5,9,39,3,8,0,22,31,2,7,8,12,3,30,6,0,0,0"
types="0,0,0,0,0,1,1,1,1,1,0,0,0,0,1,1,1,0,0,0"
mask="1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0,0,0"
labels="-1,4,-1,-1,11,-1,-1,27,-1,-1,-1,-1,19,-1,-1,-1,1,-1,-1,-1"
order="1,0"

for layout in post_head post_nohead pre_head pre_nohead; do
  flags="$base ${!layout}"
  dir=$work/$layout
  case $layout in
    post_head) want=BertForPreTraining ;; post_nohead) want=BertForMaskedLM ;;
    pre_head) want=MegatronBertForPreTraining ;; pre_nohead) want=MegatronBertForMaskedLM ;;
  esac
  # A few steps, so that biases and norms are no longer at their initial values.
  out=$("$tessera" pretrain_bert $flags --train-iters 3 --save "$dir/ckpt" 2>&1)
  check "$layout: training for the export: $out" $?
  out=$("$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/hf" 2>&1)
  check "$layout: export: $out" $?
  grep -qF "\"$want\"" "$dir/hf/config.json"
  check "$layout: config.json names $want: $(head -c 300 "$dir/hf/config.json")" $?

  # Parity with the PyTorch reference on the same batch.
  bert_in=(--batch-size 2 --tokens "$tokens" --padding-mask "$mask" --labels "$labels")
  [[ $layout == *_head ]] && bert_in+=(--token-types "$types" --sentence-order "$order")
  out=$("$tessera" debug-forward --load "$dir/ckpt" "${bert_in[@]}" --out "$dir/tessera_out.safetensors" 2>&1)
  check "$layout: debug-forward: $out" $?
  out=$("$python" "$here/hf_bert_reference.py" "$dir/hf" "$dir/tessera_out.safetensors" "${bert_in[@]}" \
        --tolerance 1e-5 2>&1)
  check "$layout: parity with the PyTorch reference: $out" $?
  echo "$out" | tail -1

  # Round trip: HF -> Tessera is the original checkpoint bit for bit; exporting it again gives the same bytes.
  out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/hf" --save-dir "$dir/back" 2>&1)
  check "$layout: import: $out" $?
  out=$(same_tensors "$dir/ckpt/iter_0000003/model.tp00.pp00.safetensors" "$dir/back/iter_0000000/model.tp00.pp00.safetensors" 2>&1)
  check "$layout: Tessera -> HF -> Tessera is bit-exact: $out" $?
  "$tessera" convert --loader tessera --saver hf --load-dir "$dir/back" --save-dir "$dir/hf2" >/dev/null 2>&1 &&
    cmp -s "$dir/hf/model.safetensors" "$dir/hf2/model.safetensors"
  check "$layout: a second export is byte-identical" $?

  # A plain Hugging Face config.json (no tessera_args): the configuration comes from HF's fields.
  cp -r "$dir/hf" "$dir/plain"
  edit_json "$dir/plain/config.json" 'del c["tessera_args"]'
  out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/plain" --save-dir "$dir/back_plain" 2>&1) &&
    out=$(same_tensors "$dir/ckpt/iter_0000003/model.tp00.pp00.safetensors" "$dir/back_plain/iter_0000000/model.tp00.pp00.safetensors" 2>&1)
  check "$layout: importing without tessera_args gives the same weights: $out" $?
  out=$("$tessera" debug-forward --load "$dir/back_plain" "${bert_in[@]}" --out "$dir/plain_out.safetensors" 2>&1) &&
    out=$(same_tensors "$dir/tessera_out.safetensors" "$dir/plain_out.safetensors" 2>&1)
  check "$layout: and the same logits, loss and gradients: $out" $?

  # Refusals: another layout's architecture for the recorded run; a decoder not tied to the embeddings.
  cp -r "$dir/hf" "$dir/wrong"
  other=MegatronBertForPreTraining
  [ "$want" = MegatronBertForPreTraining ] && other=BertForPreTraining
  edit_json "$dir/wrong/config.json" "c['architectures'] = ['$other']"
  expect_failure "tessera_args describe a bert model that is not its architecture" \
    "$tessera" convert --loader hf --saver tessera --load-dir "$dir/wrong" --save-dir "$dir/wrong_back"

  # Finetuning the import.
  out=$("$tessera" pretrain_bert $flags --train-iters 2 --load "$dir/back" --finetune 2>&1)
  check "$layout: finetune from the import exits 0: $out" $?
  grep -q "loaded checkpoint from $dir/back at iteration 0 (finetune" <<<"$out" && grep -qF "iteration        2/       2 |" <<<"$out"
  check "$layout: finetune loads the import and trains: $(tail -3 <<<"$out")" $?
done

# An untied decoder weight in the HF file is refused (Tessera's BERT ties it).
"$python" - "$here" "$work/post_head/plain/model.safetensors" "$work/untied.safetensors" <<'PY'
import json, struct, sys
sys.path.insert(0, sys.argv[1])
from hf_reference import read_safetensors
w = read_safetensors(sys.argv[2])
w["cls.predictions.decoder.weight"] = w["bert.embeddings.word_embeddings.weight"] + 1.0
header, blobs, at = {}, [], 0
for k, t in w.items():
    b = t.contiguous().numpy().tobytes()
    header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
    blobs.append(b)
    at += len(b)
h = json.dumps(header).encode()
with open(sys.argv[3], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
mv "$work/untied.safetensors" "$work/post_head/plain/model.safetensors"
expect_failure "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight" \
  "$tessera" convert --loader hf --saver tessera --load-dir "$work/post_head/plain" --save-dir "$work/untied_back"

# A BERT with no Hugging Face equivalent is refused on export, naming what HF's BERTs have.
out=$("$tessera" pretrain_bert $base --normalization RMSNorm --train-iters 1 --save "$work/rms/ckpt" 2>&1)
check "RMSNorm BERT trains: $out" $?
expect_failure "convert: this BERT has no Hugging Face equivalent" \
  "$tessera" convert --loader tessera --saver hf --load-dir "$work/rms/ckpt" --save-dir "$work/rms/hf"

finish hf_bert_parity
