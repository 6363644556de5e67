#!/usr/bin/env bash
# Hugging Face MixtralForCausalLM interchange, end to end, for a tiny Llama-style mixture-of-experts model
# (4 experts, top-2, grouped-query attention, untied output, a load-balancing loss):
#  * the export has Mixtral's config.json and tensor names (block_sparse_moe.gate, experts.E.w1/w2/w3);
#  * an independent PyTorch Mixtral (tests/hf_mixtral_reference.py, float64) run on the export gives
#    Tessera's logits, LM loss, load-balancing loss and every weight gradient on the same tokens
#    (relative 1e-5), with no routing decision near a tie;
#  * HF -> Tessera gives the original weights bit for bit (one file, shards, and a plain config.json
#    without tessera_args), and a second export is byte-identical;
#  * what Mixtral cannot express is refused on export, naming it, and a config.json whose architecture
#    is not its recorded model, or with a sliding window, on import;
#  * tessera train --load of the import finetunes, also under expert and tensor parallelism.
set -uo pipefail
tessera=${1:?usage: hf_mixtral_parity.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3  # Debian's python3-torch
source "$here/lib/checks.sh"
[ -x "$python" ] || skip "no $python"
"$python" -c "import torch" 2>/dev/null || skip "$python has no torch (Debian's python3-torch)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# safetensors in plain Python (importing torch takes seconds): {name: (dtype, shape, bytes)}.
read_tensors='
import json, struct
def read_tensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (e["dtype"], e["shape"], data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]])
            for k, e in header.items()}
'
# same_tensors A B: same-named tensors of two safetensors files, or of every model.*.safetensors of two
# checkpoint iterations (experts are in files of their own), are bit-identical, and the names agree.
same_tensors() {
  "$python" -c "$read_tensors"'
import glob, os, sys
def load(path):
    if not os.path.isdir(path):
        return read_tensors(path)
    tensors = {}
    for f in sorted(glob.glob(os.path.join(path, "model.*.safetensors"))):
        tensors.update(read_tensors(f))
    return tensors
a, b = load(sys.argv[1]), load(sys.argv[2])
names = [k for k in a if k in b]
bad = [k for k in names if a[k] != b[k]]
missing = sorted(set(a) ^ set(b))
print(f"{len(names)} tensors compared, {len(bad)} differ {bad}, only in one file: {missing}")
sys.exit(1 if bad or missing else 0)' "$1" "$2"
}
edit_json() {  # edit_json FILE PYTHON-STATEMENT-ON-c
  "$python" - "$1" "$2" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    c = json.load(f)
exec(sys.argv[2])
with open(sys.argv[1], "w") as f:
    json.dump(c, f, indent=2)
PY
}

sizes="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --group-query-attention
       --num-query-groups 2 --untie-embeddings-and-output-weights"
model="$sizes --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear"
moe="--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-aux-loss-coeff 1e-2"
run="--mock-data --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4
     --lr 1e-2 --log-interval 1 --eval-iters 0"
flags="$model $moe $run"
tokens="3,17,5,9,39,1,0,22,31,7,8,12"
dir=$work/mixtral

# A few steps of training, so that the router and the experts are no longer at their initial values.
out=$("$tessera" train $flags --train-iters 3 --save "$dir/ckpt" 2>&1)
check "training for the export: $out" $?
out=$("$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/hf" 2>&1)
check "export: $out" $?
out=$("$python" -c "$read_tensors"'
import sys
c = json.load(open(sys.argv[1] + "/config.json"))
want = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
        "num_experts_per_tok": 2, "intermediate_size": 24, "num_key_value_heads": 2, "head_dim": 8,
        "hidden_act": "silu", "tie_word_embeddings": False, "sliding_window": None}
bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
if abs(c.get("router_aux_loss_coef", 0) - 1e-2) > 1e-8:
    bad["router_aux_loss_coef"] = c.get("router_aux_loss_coef")
names = set(read_tensors(sys.argv[1] + "/model.safetensors"))
expect = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
for i in range(2):
    p = f"model.layers.{i}."
    expect |= {p + n for n in ("input_layernorm.weight", "post_attention_layernorm.weight",
                               "block_sparse_moe.gate.weight")}
    expect |= {f"{p}self_attn.{x}_proj.weight" for x in "qkvo"}
    expect |= {f"{p}block_sparse_moe.experts.{e}.w{j}.weight" for e in range(4) for j in (1, 2, 3)}
print(f"config fields not as expected: {bad}; names missing: {sorted(expect - names)}, "
      f"unexpected: {sorted(names - expect)}")
sys.exit(1 if bad or names != expect else 0)' "$dir/hf")
check "config.json and tensor names are Mixtral's: $out" $?

# Parity with the PyTorch reference on the same tokens.
out=$("$tessera" debug-forward --load "$dir/ckpt" --tokens "$tokens" --out "$dir/tessera_out.safetensors" 2>&1)
check "debug-forward: $out" $?
out=$("$python" "$here/hf_mixtral_reference.py" "$dir/hf" "$dir/tessera_out.safetensors" "$tokens" 1e-5 2>&1)
check "parity with the PyTorch reference: $out" $?
echo "$out" | tail -1

# Round trip: HF -> Tessera gives the original weights bit for bit, and exports to the same bytes.
out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/hf" --save-dir "$dir/back" 2>&1)
check "import: $out" $?
out=$(same_tensors "$dir/ckpt/iter_0000003" "$dir/back/iter_0000000" 2>&1)
check "Tessera -> HF -> Tessera is bit-exact: $out" $?
"$tessera" convert --loader tessera --saver hf --load-dir "$dir/back" --save-dir "$dir/hf2" >/dev/null 2>&1 &&
  cmp -s "$dir/hf/model.safetensors" "$dir/hf2/model.safetensors"
check "a second export is byte-identical" $?

# Sharded export: several files and an index; importing them gives the same weights again.
out=$("$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/sharded" --max-shard-size 20KB 2>&1)
check "sharded export: $out" $?
shards=$(ls "$dir/sharded"/model-*-of-*.safetensors 2>/dev/null | wc -l)
[ "$shards" -gt 1 ] && [ -f "$dir/sharded/model.safetensors.index.json" ]
check "sharded export has $shards files and an index" $?
"$tessera" convert --loader hf --saver tessera --load-dir "$dir/sharded" --save-dir "$dir/back_sharded" >/dev/null 2>&1 &&
  same_tensors "$dir/back/iter_0000000" "$dir/back_sharded/iter_0000000" >/dev/null
check "importing the sharded export gives the same weights" $?

# A plain Hugging Face config.json (no tessera_args): the MoE configuration comes from Mixtral's fields.
cp -r "$dir/hf" "$dir/plain"
edit_json "$dir/plain/config.json" 'del c["tessera_args"]'
out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/plain" --save-dir "$dir/back_plain" 2>&1) &&
  out=$(same_tensors "$dir/ckpt/iter_0000003" "$dir/back_plain/iter_0000000" 2>&1)
check "importing without tessera_args gives the same weights: $out" $?
out=$("$tessera" debug-forward --load "$dir/back_plain" --tokens "$tokens" --out "$dir/plain_out.safetensors" 2>&1) &&
  out=$(same_tensors "$dir/tessera_out.safetensors" "$dir/plain_out.safetensors" 2>&1)
check "and the same logits, losses and gradients: $out" $?

# Import refusals: a recorded MoE run under another architecture; a sliding window Tessera does not have.
cp -r "$dir/hf" "$dir/wrong"
edit_json "$dir/wrong/config.json" 'c["architectures"] = ["LlamaForCausalLM"]'
expect_failure "names LlamaForCausalLM but describes a MixtralForCausalLM model" \
  "$tessera" convert --loader hf --saver tessera --load-dir "$dir/wrong" --save-dir "$dir/wrong_back"
edit_json "$dir/plain/config.json" 'c["sliding_window"] = 8'
expect_failure "sliding_window 8 is shorter than max_position_embeddings 16" \
  "$tessera" convert --loader hf --saver tessera --load-dir "$dir/plain" --save-dir "$dir/window_back"

# Export refusals: each model trains one step, and its export names what Mixtral cannot express.
refuse() {  # refuse NAME "MODEL FLAGS" "EXPECTED MESSAGE"
  local out
  out=$("$tessera" train $2 $run --train-iters 1 --save "$work/$1" 2>&1)
  check "$1 trains: $out" $?
  expect_failure "no MixtralForCausalLM equivalent: $3" \
    "$tessera" convert --loader tessera --saver hf --load-dir "$work/$1" --save-dir "$work/$1_hf"
}
refuse dense_layer "$model $moe --moe-layer-freq [1,0]" "layer 2 is a dense MLP"
refuse pyramid "$model --num-experts 2 4 --moe-router-topk 2" "layer 2 has 4 experts and layer 1 2 (a pyramid)"
refuse shared "$model $moe --moe-shared-expert-intermediate-size 16" "it has a shared expert"
refuse pre_softmax "$model $moe --moe-router-pre-softmax" "its top-k probabilities are not renormalised"
refuse sigmoid "$model $moe --moe-router-score-function sigmoid" "it routes by sigmoid scores"
refuse capacity "$model $moe --moe-expert-capacity-factor 1.5" "it drops tokens over capacity"
refuse bias "$sizes --position-embedding-type rope --normalization RMSNorm --swiglu $moe" "it has biases"
refuse layernorm "$sizes --position-embedding-type rope --swiglu --disable-bias-linear $moe" "it is not Llama style"

# Finetuning the import: iteration 0, then training continues; under mpirun with two expert-parallel
# ranks, and at tensor-parallel size 2 (with sequence parallelism, as MoE requires).
out=$("$tessera" train $flags --train-iters 2 --load "$dir/back" --finetune 2>&1)
check "finetune from the import exits 0: $out" $?
grep -q "loaded checkpoint from $dir/back at iteration 0 (finetune" <<<"$out" && grep -qF "iteration        2/       2 |" <<<"$out"
check "finetune loads the import and trains: $(tail -3 <<<"$out")" $?
if command -v mpirun >/dev/null; then
  for layout in "--expert-model-parallel-size 2" "--tensor-model-parallel-size 2 --sequence-parallel"; do
    out=$(OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 \
          "$tessera" train $flags $layout --train-iters 2 --load "$dir/back" --finetune 2>&1)
    check "finetune with $layout: $(tail -5 <<<"$out")" $?
  done
fi

finish hf_mixtral_parity
