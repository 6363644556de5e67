#!/usr/bin/env bash
# Hugging Face interchange of the RoPE scalings and of Qwen3 (issue 53), end to end, at toy size:
#  * a Llama trained with --use-rope-scaling (llama3) or --rotary-seq-len-interpolation-factor (linear)
#    exports as LlamaForCausalLM with that rope_scaling; one with --qk-layernorm and a head size other
#    than hidden / heads as Qwen3ForCausalLM (q_norm, k_norm, head_dim);
#  * HF -> Tessera gives the weights back bit for bit;
#  * the independent float64 PyTorch reference (tests/hf_reference.py) run on the export gives Tessera's
#    logits, loss and every weight gradient (relative 1e-5);
#  * a config.json without tessera_args whose llama3 bands cover all three regimes at these sizes
#    (original_max_position_embeddings 64) imports, matches the reference, and generates;
#  * yarn is refused by name.
set -uo pipefail
tessera=${1:?usage: hf_rope_qwen3_parity.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3  # Debian's python3-torch
source "$here/lib/checks.sh"
[ -x "$python" ] || skip "no $python"
"$python" -c "import torch" 2>/dev/null || skip "$python has no torch (Debian's python3-torch)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

base="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
      --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-2
      --log-interval 1 --eval-iters 0 --position-embedding-type rope --normalization RMSNorm --swiglu
      --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear"
llama3="--use-rope-scaling --rope-scaling-factor 4"
linear="--rotary-seq-len-interpolation-factor 2"
qwen3="--qk-layernorm --kv-channels 16 --rotary-base 1000000"
tokens="3,17,5,9,39,1,0,22,31,7,8,12,2,30,11"

# parity DIR CKPT: Tessera's forward and gradients of CKPT against the reference run on the HF folder DIR.
parity() {
  "$tessera" debug-forward --load "$2" --tokens "$tokens" --out "$work/out.safetensors" >/dev/null 2>&1 &&
    "$python" "$here/hf_reference.py" "$1" "$work/out.safetensors" "$tokens" 1e-5 2>&1
}

for variant in llama3 linear qwen3; do
  dir=$work/$variant
  out=$("$tessera" train $base ${!variant} --train-iters 2 --save "$dir/ckpt" 2>&1)
  check "$variant: training for the export: $out" $?
  out=$("$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/hf" 2>&1)
  check "$variant: export: $out" $?
  out=$("$python" - "$dir/hf/config.json" "$variant" <<'PY'
import json, sys
c, variant = json.load(open(sys.argv[1])), sys.argv[2]
want = {"llama3": ("LlamaForCausalLM", {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
        "linear": ("LlamaForCausalLM", {"rope_type": "linear", "factor": 2.0}),
        "qwen3": ("Qwen3ForCausalLM", None)}[variant]
got = (c["architectures"][0], c.get("rope_scaling"))
print(got)
sys.exit(0 if got == want and (variant != "qwen3" or c["head_dim"] == 16) else 1)
PY
)
  check "$variant: config.json names the architecture and rope_scaling: $out" $?
  out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/hf" --save-dir "$dir/back" 2>&1) &&
    cmp -s <("$python" -c 'import sys; sys.path.insert(0, sys.argv[1]); from hf_reference import read_safetensors as r
a = r(sys.argv[2]); print(sorted((k, a[k].numpy().tobytes().hex()) for k in a))' "$here" \
               "$dir/ckpt/iter_0000002/model.tp00.pp00.safetensors") \
           <("$python" -c 'import sys; sys.path.insert(0, sys.argv[1]); from hf_reference import read_safetensors as r
a = r(sys.argv[2]); print(sorted((k, a[k].numpy().tobytes().hex()) for k in a))' "$here" \
               "$dir/back/iter_0000000/model.tp00.pp00.safetensors")
  check "$variant: Tessera -> HF -> Tessera is bit-exact: $out" $?
  out=$(parity "$dir/hf" "$dir/ckpt")
  check "$variant: parity with the PyTorch reference: $out" $?
  echo "$variant: $(tail -1 <<<"$out")"
done

# A plain config.json (no tessera_args) with Llama 3.x bands that reach these positions: import, parity,
# generation (the export's padded vocabulary of 128 is the plain config's: a NullTokenizer of 127 + 1 ids).
dir=$work/bands
mkdir -p "$dir/hf" && cp "$work/llama3/hf/model.safetensors" "$dir/hf/" &&
  "$python" -c 'import json, sys; c = json.load(open(sys.argv[1])); c.pop("tessera_args")
c["rope_scaling"] = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 64}
json.dump(c, open(sys.argv[2], "w"))' "$work/llama3/hf/config.json" "$dir/hf/config.json"
out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/hf" --save-dir "$dir/ckpt" 2>&1)
check "bands: import of a plain config.json: $out" $?
out=$(parity "$dir/hf" "$dir/ckpt")
check "bands: parity with the PyTorch reference: $out" $?
echo "bands: $(tail -1 <<<"$out")"
# Not vacuous: the same reference without the scaling disagrees with Tessera's import.
mkdir -p "$dir/unscaled" && cp "$dir/hf/model.safetensors" "$dir/unscaled/" &&
  "$python" -c 'import json, sys; c = json.load(open(sys.argv[1])); c.pop("rope_scaling")
json.dump(c, open(sys.argv[2], "w"))' "$dir/hf/config.json" "$dir/unscaled/config.json"
out=$("$python" "$here/hf_reference.py" "$dir/unscaled" "$work/out.safetensors" "$tokens" 1e-5 2>&1)
[ $? -ne 0 ]
check "bands: the reference without rope_scaling disagrees: $(tail -1 <<<"$out")" $?
out=$("$tessera" generate --load "$dir/ckpt" --tokenizer-type NullTokenizer --vocab-size 127 --prompt "3 5 7" \
      --tokens-to-generate 6 --temperature 0 2>&1)
rc=$?
[ $rc -eq 0 ] && [ "$(wc -w <<<"$out")" -ge 6 ]
check "bands: generation on the import (rc $rc): $out" $?
# The Qwen3 import generates too.
out=$("$tessera" generate --load "$work/qwen3/back" --prompt "3 5 7" --tokens-to-generate 6 --temperature 0 2>&1)
check "qwen3: generation on the import: $out" $?

"$python" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
json.dump(c, open(sys.argv[1], "w"))' "$dir/hf/config.json"
expect_failure "rope_scaling type 'yarn' is not supported" \
  "$tessera" convert --loader hf --saver tessera --load-dir "$dir/hf" --save-dir "$dir/yarn"

finish hf_rope_qwen3_parity
