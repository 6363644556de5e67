#!/usr/bin/env bash
# Hugging Face Qwen3MoeForCausalLM and DeepseekV3ForCausalLM interchange (issue 53), at toy size, against
# the independent float64 PyTorch reference tests/hf_moe_reference.py:
#  * Qwen3-MoE: a Tessera model with --qk-layernorm, a dense first layer (--moe-layer-freq [0,1]) and
#    softmax top-2 routing exports as Qwen3MoeForCausalLM (mlp_only_layers, num_experts, norm_topk_prob);
#    the reference gives Tessera's logits, loss, load-balancing loss and every gradient (relative 1e-5);
#    HF -> Tessera is bit-exact, from the export and from a plain config.json; the import generates;
#  * DeepSeek-V3: a toy checkpoint written by PyTorch as DeepSeek publishes it (tests/hf_deepseek_toy.py:
#    bf16 MLA weights, YaRN, a dense first layer, the sigmoid group-limited router with its correction
#    bias, routed_scaling_factor, a shared expert) imports; Tessera's forward and gradients match the
#    reference; `tessera generate` and `tessera serve` on the import (MLA's compressed-cache decoding)
#    give the reference's greedy tokens; its FP8 form (F8_E4M3 weights, weight_scale_inv blocks) imports and matches too;
#    exports back to the same tensors and config, and re-imports bit for bit; a DeepSeek-V3-style model
#    trained by Tessera (Megatron's flags, one MTP module) exports and matches the reference;
#  * DeepSeek-V2 (V2-Lite's form: no query compression, softmax group-limited greedy routing not renormalised)
#    likewise: import, parity, greedy generation, round trip, and a trained V2-style model's export;
#  * what either side cannot express is refused by name.
set -uo pipefail
tessera=${1:?usage: hf_moe_parity.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3  # Debian's python3-torch
source "$here/lib/checks.sh"
source "$here/lib/server.sh"
[ -x "$python" ] || skip "no $python"
"$python" -c "import torch" 2>/dev/null || skip "$python has no torch (Debian's python3-torch)"
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT

# same_tensors A B: the tensors of two checkpoint iterations (every model.*.safetensors) are bit-identical.
same_tensors() {
  "$python" - "$1" "$2" <<'PY'
import glob, json, os, struct, sys
def load(path):
    out = {}
    for f in sorted(glob.glob(os.path.join(path, "model.*.safetensors"))):
        data = open(f, "rb").read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        header.pop("__metadata__", None)
        out.update({k: (e["dtype"], e["shape"], data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]])
                    for k, e in header.items()})
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in a if k in b and a[k] != b[k]]
print(f"{len(a)} tensors, {len(bad)} differ {bad[:5]}, only in one: {sorted(set(a) ^ set(b))[:5]}")
sys.exit(1 if bad or set(a) != set(b) or not a else 0)
PY
}
edit_json() {  # edit_json FILE PYTHON-STATEMENT-ON-c
  "$python" -c 'import json, sys
c = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"), indent=2)' "$1" "$2"
}
parity() {  # parity HF_DIR CKPT TOKENS
  "$tessera" debug-forward --load "$2" --tokens "$3" --out "$work/out.safetensors" >/dev/null 2>&1 &&
    "$python" "$here/hf_moe_reference.py" "$1" "$work/out.safetensors" "$3" 1e-5 2>&1
}

# ---- Qwen3-MoE: Tessera -> HF -> Tessera ----
run="--mock-data --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4
     --lr 1e-2 --log-interval 1 --eval-iters 0"
qwen="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --group-query-attention
      --num-query-groups 2 --untie-embeddings-and-output-weights --position-embedding-type rope
      --normalization RMSNorm --swiglu --disable-bias-linear --qk-layernorm --kv-channels 16 --rotary-base 1000000
      --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-aux-loss-coeff 1e-2 --moe-layer-freq [0,1]"
tokens="3,17,5,9,39,1,0,22,31,7,8,12"
dir=$work/qwen3_moe
out=$("$tessera" train $qwen $run --train-iters 3 --save "$dir/ckpt" 2>&1)
check "qwen3_moe: training for the export: $out" $?
out=$("$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/hf" 2>&1)
check "qwen3_moe: export: $out" $?
out=$("$python" -c 'import json, sys
c = json.load(open(sys.argv[1]))
want = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 24, "decoder_sparse_step": 1, "mlp_only_layers": [0], "norm_topk_prob": True,
        "head_dim": 16, "num_key_value_heads": 2}
bad = {k: c.get(k) for k in want if c.get(k) != want[k]}
print(f"fields not as expected: {bad}"); sys.exit(1 if bad else 0)' "$dir/hf/config.json" 2>&1)
check "qwen3_moe: config.json is Qwen3-MoE's: $out" $?
out=$(parity "$dir/hf" "$dir/ckpt" "$tokens")
check "qwen3_moe: parity with the PyTorch reference: $out" $?
echo "qwen3_moe: $(tail -1 <<<"$out")"
out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/hf" --save-dir "$dir/back" 2>&1) &&
  out=$(same_tensors "$dir/ckpt/iter_0000003" "$dir/back/iter_0000000" 2>&1)
check "qwen3_moe: Tessera -> HF -> Tessera is bit-exact: $out" $?
mkdir -p "$dir/plain" && cp "$dir/hf/model.safetensors" "$dir/hf/config.json" "$dir/plain/" &&
  edit_json "$dir/plain/config.json" 'del c["tessera_args"]'
out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/plain" --save-dir "$dir/back_plain" 2>&1) &&
  out=$(same_tensors "$dir/ckpt/iter_0000003" "$dir/back_plain/iter_0000000" 2>&1)
check "qwen3_moe: a plain config.json (no tessera_args) imports the same weights: $out" $?
out=$("$tessera" generate --load "$dir/back" --prompt "3 5 7" --tokens-to-generate 6 --temperature 0 2>&1)
check "qwen3_moe: generation on the import: $out" $?
# norm_topk_prob false (transformers' default): the top-k probabilities as they are (--moe-router-pre-softmax).
mkdir -p "$dir/unnormalised" && cp "$dir/plain/model.safetensors" "$dir/plain/config.json" "$dir/unnormalised/" &&
  edit_json "$dir/unnormalised/config.json" 'c["norm_topk_prob"] = False'
out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/unnormalised" --save-dir "$dir/unnormalised_ckpt" 2>&1) &&
  out=$(parity "$dir/unnormalised" "$dir/unnormalised_ckpt" "$tokens")
check "qwen3_moe: norm_topk_prob false imports and matches the reference: $out" $?
edit_json "$dir/plain/config.json" 'c["num_experts"] = 0'
expect_failure "a model without experts is a Qwen3ForCausalLM" \
  "$tessera" convert --loader hf --saver tessera --load-dir "$dir/plain" --save-dir "$dir/no_experts"
out=$("$tessera" train ${qwen/--moe-aux-loss-coeff 1e-2/--moe-router-score-function sigmoid} $run --train-iters 1 \
      --save "$work/sigmoid" 2>&1)
check "qwen3_moe: a sigmoid-routed model trains: $out" $?
expect_failure "no Qwen3MoeForCausalLM equivalent: it routes by sigmoid scores" \
  "$tessera" convert --loader tessera --saver hf --load-dir "$work/sigmoid" --save-dir "$work/sigmoid_hf"

# ---- DeepSeek-V3: a published-style checkpoint -> Tessera ----
dir=$work/deepseek
tokens="3,17,5,9,63,1,0,22,31,7,8,12,2,30,11"
out=$("$python" "$here/hf_deepseek_toy.py" "$dir/hf" 2>&1)
check "deepseek: writing the toy checkpoint: $out" $?
out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/hf" --save-dir "$dir/ckpt" 2>&1)
check "deepseek: import: $out" $?
out=$(parity "$dir/hf" "$dir/ckpt" "$tokens")
check "deepseek: parity with the PyTorch reference: $out" $?
echo "deepseek: $(tail -1 <<<"$out")"
# Not vacuous: without YaRN's scaling the reference disagrees with Tessera's import.
mkdir -p "$dir/unscaled" && cp "$dir/hf/model.safetensors" "$dir/hf/config.json" "$dir/unscaled/" &&
  edit_json "$dir/unscaled/config.json" 'c["rope_scaling"] = None'
out=$("$python" "$here/hf_moe_reference.py" "$dir/unscaled" "$work/out.safetensors" "$tokens" 1e-5 2>&1)
[ $? -ne 0 ]
check "deepseek: the reference without rope_scaling disagrees: $(tail -1 <<<"$out")" $?
# Generation: the vocabulary of 64 is a NullTokenizer's 63 ids and its end of document.
want=$("$python" "$here/hf_moe_reference.py" --greedy "$dir/hf" 3,5,7 6 2>&1)
out=$("$tessera" generate --load "$dir/ckpt" --tokenizer-type NullTokenizer --vocab-size 63 --prompt "3 5 7" \
      --tokens-to-generate 6 --temperature 0 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qF -- "$want" <<<"$out"
check "deepseek: generation on the import gives the reference's greedy tokens ($want; rc $rc): $out" $?
# Serving the import (Megatron's REST API): the same greedy tokens.
if command -v curl >/dev/null; then
  start_server "$work/serve.log" "$tessera" serve --load "$dir/ckpt" --tokenizer-type NullTokenizer --vocab-size 63 \
    --port 0 --max-tokens-to-generate 8
  check "deepseek: the server starts on the import: $(cat "$work/serve.log")" $?
  out=$(curl -s -X PUT -H 'Content-Type: application/json' \
        -d '{"prompts": ["3 5 7"], "tokens_to_generate": 6, "top_k": 1}' "http://127.0.0.1:$port/api")
  grep -qF -- "3 5 7 $want" <<<"$out"
  check "deepseek: serving the import gives the reference's greedy tokens ($want): $out" $?
  stop_server
  check "deepseek: the server stops: $(tail -2 "$work/serve.log")" $?
fi
# Export: the same tensors (values; the toy's are bf16) and config, and back to the same checkpoint bit for bit.
out=$("$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/export" 2>&1)
check "deepseek: export of the import: $out" $?
out=$("$python" -c 'import json, sys, torch; sys.path.insert(0, sys.argv[1]); from hf_reference import read_model
a, wa = read_model(sys.argv[2]); b, wb = read_model(sys.argv[3])
keys = ["architectures", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "n_routed_experts", "n_shared_experts", "n_group", "topk_group", "num_experts_per_tok", "first_k_dense_replace",
        "num_nextn_predict_layers", "routed_scaling_factor", "moe_intermediate_size", "intermediate_size"]
bad = {k: (a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)}
rs = {k: b["rope_scaling"].get(k) for k in a["rope_scaling"] if k != "type"}
bad.update({"rope_scaling": (a["rope_scaling"], b["rope_scaling"])} if any(rs[k] != a["rope_scaling"][k] for k in rs) else {})
diff = sorted(k for k in set(wa) | set(wb) if k not in wa or k not in wb or not torch.equal(wa[k], wb[k]))
print(f"config differences {bad}; tensors differing or missing: {diff[:5]}"); sys.exit(1 if bad or diff else 0)' \
  "$here" "$dir/hf" "$dir/export" 2>&1)
check "deepseek: the export has the original's config and tensors: $out" $?
out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/export" --save-dir "$dir/back" 2>&1) &&
  out=$(same_tensors "$dir/ckpt/iter_0000000" "$dir/back/iter_0000000" 2>&1)
check "deepseek: Tessera -> HF -> Tessera is bit-exact: $out" $?

# DeepSeek-V3's FP8 release: F8_E4M3 projection weights with weight_scale_inv blocks (16 x 16 here)
# dequantised on import; the reference dequantises the same bytes itself.
out=$("$python" "$here/hf_deepseek_toy.py" --fp8 "$work/fp8/hf" 2>&1) &&
  out=$("$tessera" convert --loader hf --saver tessera --load-dir "$work/fp8/hf" --save-dir "$work/fp8/ckpt" 2>&1)
check "deepseek: import of FP8 weights: $out" $?
out=$(parity "$work/fp8/hf" "$work/fp8/ckpt" "$tokens")
check "deepseek: the FP8 import against the reference: $out" $?
echo "deepseek (fp8): $(tail -1 <<<"$out")"
edit_json "$work/fp8/hf/config.json" 'c["quantization_config"]["weight_block_size"] = [128, 128]'
expect_failure "not the [1, 1] blocks of 128x128 of model.layers.0.mlp.down_proj.weight" \
  "$tessera" convert --loader hf --saver tessera --load-dir "$work/fp8/hf" --save-dir "$work/fp8/wrong_blocks"

# A DeepSeek-V3-style model trained by Tessera with Megatron's flags (MLA with YaRN, sigmoid group-limited
# routing with a moving expert bias, a shared expert, a dense first layer, one MTP module) exports, and the
# reference on the export gives the trained checkpoint's forward and gradients (the MTP objective included).
ds="--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --untie-embeddings-and-output-weights
    --position-embedding-type rope --normalization RMSNorm --norm-epsilon 1e-6 --swiglu --disable-bias-linear
    --qk-layernorm --multi-latent-attention --q-lora-rank 24 --kv-lora-rank 16 --qk-head-dim 8 --qk-pos-emb-head-dim 8
    --v-head-dim 12 --rope-type yarn --rotary-scaling-factor 4 --mscale 0.9 --mscale-all-dim 0.8
    --yarn-original-max-position-embeddings 4 --rotary-base 100 --num-experts 8 --moe-router-topk 4
    --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2
    --moe-router-num-groups 4 --moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5 --moe-ffn-hidden-size 12
    --moe-shared-expert-intermediate-size 12 --moe-layer-freq [0,1] --moe-router-load-balancing-type none
    --mtp-num-layers 1"
tdir=$work/deepseek_trained
out=$("$tessera" train $ds $run --train-iters 3 --save "$tdir/ckpt" 2>&1)
check "deepseek: a DeepSeek-V3-style model trains: $out" $?
out=$("$tessera" convert --loader tessera --saver hf --load-dir "$tdir/ckpt" --save-dir "$tdir/hf" 2>&1)
check "deepseek: its export: $out" $?
out=$(parity "$tdir/hf" "$tdir/ckpt" "3,17,5,9,39,1,0,22,31,7,8,12")
check "deepseek: the trained model's export against the reference: $out" $?
echo "deepseek (trained): $(tail -1 <<<"$out")"

# ---- DeepSeek-V2 (V2-Lite's form: q_proj, softmax group-limited greedy routing, not renormalised) ----
dir=$work/deepseek_v2
out=$("$python" "$here/hf_deepseek_toy.py" --v2 "$dir/hf" 2>&1) &&
  out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/hf" --save-dir "$dir/ckpt" 2>&1)
check "deepseek_v2: import: $out" $?
out=$(parity "$dir/hf" "$dir/ckpt" "$tokens")
check "deepseek_v2: parity with the PyTorch reference: $out" $?
echo "deepseek_v2: $(tail -1 <<<"$out")"
want=$("$python" "$here/hf_moe_reference.py" --greedy "$dir/hf" 3,5,7 6 2>&1)
out=$("$tessera" generate --load "$dir/ckpt" --tokenizer-type NullTokenizer --vocab-size 63 --prompt "3 5 7" \
      --tokens-to-generate 6 --temperature 0 2>&1)
rc=$?
[ $rc -eq 0 ] && grep -qF -- "$want" <<<"$out"
check "deepseek_v2: generation on the import gives the reference's greedy tokens ($want; rc $rc): $out" $?
out=$("$tessera" convert --loader tessera --saver hf --load-dir "$dir/ckpt" --save-dir "$dir/export" 2>&1) &&
  out=$("$tessera" convert --loader hf --saver tessera --load-dir "$dir/export" --save-dir "$dir/back" 2>&1) &&
  out=$(same_tensors "$dir/ckpt/iter_0000000" "$dir/back/iter_0000000" 2>&1)
check "deepseek_v2: Tessera -> HF -> Tessera is bit-exact: $out" $?
# A softmax-routed MLA model exports as DeepSeek-V2 when its probabilities are not renormalised.
v2flags=${ds/--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2/}
v2flags="${v2flags/--mtp-num-layers 1/} --moe-router-pre-softmax"
out=$("$tessera" train ${v2flags/--moe-router-topk 4/--moe-router-topk 2} $run --train-iters 3 --save "$work/v2_trained" 2>&1) &&
  out=$("$tessera" convert --loader tessera --saver hf --load-dir "$work/v2_trained" --save-dir "$work/v2_trained_hf" 2>&1) &&
  out=$(parity "$work/v2_trained_hf" "$work/v2_trained" "3,17,5,9,39,1,0,22,31,7,8,12")
check "deepseek_v2: a DeepSeek-V2-style model trained by Tessera exports and matches the reference: $out" $?
out=$("$tessera" train ${v2flags/--moe-router-pre-softmax/} $run --train-iters 1 --save "$work/renormalised" 2>&1)
check "deepseek_v2: a renormalised softmax MLA model trains: $out" $?
expect_failure "no DeepseekV2ForCausalLM equivalent: its top-k probabilities are renormalised" \
  "$tessera" convert --loader tessera --saver hf --load-dir "$work/renormalised" --save-dir "$work/renormalised_hf"

# Refusals of what Tessera cannot express.
refuse() {  # refuse NAME PYTHON-EDIT EXPECTED-MESSAGE
  mkdir -p "$work/$1" && cp "$dir/hf/model.safetensors" "$dir/hf/config.json" "$work/$1/" && edit_json "$work/$1/config.json" "$2"
  expect_failure "$3" "$tessera" convert --loader hf --saver tessera --load-dir "$work/$1" --save-dir "$work/$1_back"
}
dir=$work/deepseek
refuse group_score 'c["topk_group"] = 1' "they agree only at 2"
refuse yarn_factor 'c["rope_scaling"]["factor"] = 8.0' "is not max_position_embeddings / original_max_position_embeddings"
refuse rope_type 'c["rope_scaling"]["type"] = "longrope"' "rope_scaling type 'longrope' is not supported"
refuse norm_eps 'c["rms_norm_eps"] = 1e-5' "is not the 1e-6 of its latent norms"
refuse no_norm 'c["norm_topk_prob"] = False' "norm_topk_prob false"
dir=$work/deepseek_v2
refuse v2_groups 'c["num_experts_per_tok"] = 4' "they agree only at 1"
refuse v2_norm 'c["norm_topk_prob"] = True' "DeepSeek-V2 norm_topk_prob true"

finish hf_moe_parity
