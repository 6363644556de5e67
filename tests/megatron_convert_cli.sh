#!/usr/bin/env bash
# tessera convert --loader megatron: Megatron-LM legacy checkpoints (iter_N/mp_rank_TT_PPP/model_optim_rng.pt)
# written by PyTorch's torch.save (tests/megatron_fixture.py) at tensor 2 x pipeline 2, for a GPT-2 style and
# a Llama style (GQA, SwiGLU, RoPE, untied) model, under Megatron-Core's local-spec names, its Transformer
# Engine names and the legacy language_model.* names, stored as fp32, bf16 and fp16, with virtual stages and
# a release checkpoint:
#  * the converted model's loss on fixed tokens (tessera debug-forward) equals the loss of a plain PyTorch
#    forward over the merged weights (relative 1e-5);
#  * the iteration and the model configuration are carried, flags given win over the saved args;
#  * the converted checkpoint resumes at the next iteration, finetunes at tp2 and generates;
#  * a missing or truncated file, args that disagree with the tensors, a MoE checkpoint, a missing tracker and
#    a missing --ckpt-step iteration are refused with a message naming the cause.
set -uo pipefail
tessera=${1:?usage: megatron_convert_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/checks.sh"
require_torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tokens="3,17,5,9,40,1,0,22,31,7,8,12,2"

# fixture NAME STYLE SCHEME [options]: writes $work/NAME/megatron and sets $reference to its loss.
fixture() {
  local name=$1 style=$2 scheme=$3 out
  shift 3
  out=$("$python" -W ignore "$here/megatron_fixture.py" "$work/$name/megatron" "$style" "$scheme" "$tokens" "$@" 2>&1)
  check "$name: fixture: $out" $?
  reference=$(sed -n 's/^reference loss: //p' <<<"$out")
}

# same_loss NAME: converted model's debug-forward loss equals $reference (relative 1e-5).
same_loss() {
  local name=$1 out
  out=$("$tessera" debug-forward --load "$work/$name/tessera" --tokens "$tokens" --out "$work/$name/out.safetensors" 2>&1)
  check "$name: debug-forward: $out" $?
  out=$("$python" - "$here" "$work/$name/out.safetensors" "$reference" <<'PY' 2>&1
import sys
sys.path.insert(0, sys.argv[1])
from hf_reference import read_safetensors
loss = read_safetensors(sys.argv[2])["loss"].double().item()
ref = float(sys.argv[3])
rel = abs(loss - ref) / abs(ref)
print(f"tessera loss {loss:.9e}, PyTorch reference {ref:.9e}, relative difference {rel:.2e}")
sys.exit(0 if rel <= 1e-5 else 1)
PY
)
  check "$name: loss equals the reference: $out" $?
  echo "$name: $out"
}

for variant in "gpt2_mcore gpt2 mcore" "gpt2_legacy_fp16_vp2 gpt2 legacy --dtype float16 --vp 2" \
               "llama_te_bf16 llama te --dtype bfloat16" "llama_legacy_release llama legacy --release" \
               "llama_mcore_pp1 llama mcore --pp 1"; do
  set -- $variant
  name=$1
  shift
  fixture "$name" "$@"
  out=$("$tessera" convert --loader megatron --load-dir "$work/$name/megatron" --save-dir "$work/$name/tessera" 2>&1)
  check "$name: convert: $out" $?
  echo "$out" >"$work/$name/convert.log"
  same_loss "$name"
done

# Without pipeline stages Megatron names the rank directories mp_rank_TT.
[ -d "$work/llama_mcore_pp1/megatron/iter_0000020/mp_rank_01" ]
check "the pp 1 fixture has mp_rank_01: $(ls "$work/llama_mcore_pp1/megatron/iter_0000020")" $?

# The iteration is carried (a release checkpoint is iteration 0); the configuration is the saved args'.
[ "$(cat "$work/gpt2_mcore/tessera/latest_checkpointed_iteration.txt" 2>/dev/null)" = 20 ] &&
  [ -d "$work/gpt2_mcore/tessera/iter_0000020" ]
check "the converted checkpoint is at the Megatron iteration 20: $(ls "$work/gpt2_mcore/tessera")" $?
grep -q '"consumed_train_samples": *640' "$work/gpt2_mcore/tessera/iter_0000020/index.json"
check "the consumed samples (640) are carried" $?
out=$("$tessera" generate --load "$work/gpt2_mcore/tessera" --prompt "3 4 5" --tokens-to-generate 4 2>&1)
[ $? -eq 0 ] && grep -qE "^3 4 5( [0-9]+){4}$" <<<"$out"
check "the converted checkpoint generates with the NullTokenizer its args name: $out" $?
[ -d "$work/llama_legacy_release/tessera/iter_0000000" ]
check "a release checkpoint converts to iteration 0: $(ls "$work/llama_legacy_release/tessera")" $?
grep -q '"num_query_groups": *2' "$work/llama_te_bf16/tessera/iter_0000020/index.json" &&
  grep -q '"untie_embeddings_and_output_weights": *true' "$work/llama_te_bf16/tessera/iter_0000020/index.json"
check "the Llama model's GQA and untied output come from the saved args" $?

# The converted checkpoint is a Tessera one: it resumes at the next iteration (the optimizer state is not
# carried), and finetunes under mpirun at tensor-parallel size 2.
llama="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --kv-channels 8 --group-query-attention
       --num-query-groups 2 --ffn-hidden-size 48 --swiglu --position-embedding-type rope --normalization RMSNorm
       --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 16 --max-position-embeddings 16
       --hidden-dropout 0 --attention-dropout 0 --mock-data --tokenizer-type NullTokenizer --vocab-size 40
       --make-vocab-size-divisible-by 8 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1
       --eval-iters 0"
out=$("$tessera" train $llama --train-iters 21 --load "$work/llama_te_bf16/tessera" --no-load-optim --no-load-rng 2>&1)
check "resume of the converted checkpoint: $out" $?
grep -qF "iteration       21/      21 |" <<<"$out"
check "the converted checkpoint resumes at iteration 21: $out" $?
if command -v mpirun >/dev/null; then
  out=$(OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 \
        "$tessera" train $llama --tensor-model-parallel-size 2 --train-iters 1 --load "$work/llama_te_bf16/tessera" \
        --finetune 2>&1)
  check "finetune of the converted checkpoint at tp2: $out" $?
fi

# --ckpt-step picks the iteration; a missing one is refused.
out=$("$tessera" convert --loader megatron --load-dir "$work/gpt2_mcore/megatron" --ckpt-step 20 \
      --save-dir "$work/step/tessera" 2>&1)
check "--ckpt-step 20 converts: $out" $?
expect_failure "iter_0000099 is missing (--ckpt-step)" \
  "$tessera" convert --loader megatron --load-dir "$work/gpt2_mcore/megatron" --ckpt-step 99 --save-dir "$work/x1"

# A flag given wins over the saved args, and a shape it then disagrees with names the tensor and file.
expect_failure "mp_rank_00_000/model_optim_rng.pt: decoder.layers.0.mlp.linear_fc1.weight has shape [32, 32] but the model the checkpoint's args (and the flags given) describe needs [40, 32]" \
  "$tessera" convert --loader megatron --load-dir "$work/gpt2_mcore/megatron" --ffn-hidden-size 80 --save-dir "$work/x2"
# Saved args that disagree with the tensors: the same, from the args alone.
fixture bad_args gpt2 mcore --set num_attention_heads=8 --set kv_channels=8
expect_failure "decoder.layers.0.self_attention.linear_qkv.weight has shape [48, 32] but the model the checkpoint's args (and the flags given) describe needs [96, 32]" \
  "$tessera" convert --loader megatron --load-dir "$work/bad_args/megatron" --save-dir "$work/x3"
# A tied model's last-stage copy of the embeddings that drifted from them converts with a note.
fixture drift gpt2 mcore --drift-tied-copy
out=$("$tessera" convert --loader megatron --load-dir "$work/drift/megatron" --save-dir "$work/drift/tessera" 2>&1)
[ $? -eq 0 ] && grep -qF "output_layer.weight in $work/drift/megatron/iter_0000020/mp_rank_00_001/model_optim_rng.pt) differs from the embedding by up to 0.25" <<<"$out"
check "a drifted tied copy is a note: $out" $?
[ -s "$work/gpt2_mcore/convert.log" ] && [ -s "$work/gpt2_legacy_fp16_vp2/convert.log" ] &&
  ! grep -q "differs from the embedding" "$work/gpt2_mcore/convert.log" "$work/gpt2_legacy_fp16_vp2/convert.log"
check "an exact tied copy (output_layer.weight, word_embeddings_for_head.weight) is not" $?
# Args that describe another model (experts the files do not hold) are refused naming the tensor missing.
fixture moe gpt2 mcore --set num_experts=8
expect_failure "moe/megatron/iter_0000020 holds decoder.layers.0.mlp.router.weight (or its legacy language_model.* name), which this model has" \
  "$tessera" convert --loader megatron --load-dir "$work/moe/megatron" --save-dir "$work/x4"
# A missing rank's file, a directory without the tracker.
rm "$work/bad_args/megatron/iter_0000020/mp_rank_01_001/model_optim_rng.pt"
expect_failure "mp_rank_01_001/model_optim_rng.pt is missing" \
  "$tessera" convert --loader megatron --load-dir "$work/bad_args/megatron" --save-dir "$work/x5"
# A damaged file is named, and nothing is left at --save-dir.
cp -r "$work/gpt2_mcore/megatron" "$work/truncated"
head -c 3000 "$work/gpt2_mcore/megatron/iter_0000020/mp_rank_01_001/model_optim_rng.pt" \
  >"$work/truncated/iter_0000020/mp_rank_01_001/model_optim_rng.pt"
expect_failure "truncated/iter_0000020/mp_rank_01_001/model_optim_rng.pt: not a zip archive" \
  "$tessera" convert --loader megatron --load-dir "$work/truncated" --save-dir "$work/x8"
[ ! -e "$work/x8" ]
check "a failed conversion leaves no --save-dir" $?
mkdir -p "$work/empty"
expect_failure "latest_checkpointed_iteration.txt is missing" \
  "$tessera" convert --loader megatron --load-dir "$work/empty" --save-dir "$work/x6"
# Model flags mean nothing to the other loaders; the save directory rules are convert's.
expect_failure "model flags apply to --loader megatron only" \
  "$tessera" convert --loader hf --saver tessera --hidden-size 64 --load-dir "$work/empty" --save-dir "$work/x7"
expect_failure "is not empty" \
  "$tessera" convert --loader megatron --load-dir "$work/gpt2_mcore/megatron" --save-dir "$work/gpt2_mcore/tessera"

finish megatron_convert_cli
