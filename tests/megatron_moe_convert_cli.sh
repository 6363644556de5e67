#!/usr/bin/env bash
# tessera convert --loader megatron on Megatron-LM legacy mixture-of-experts checkpoints: a Llama-style MoE model
# (4 experts, top 2) trained one iteration by Tessera is written by PyTorch as Megatron's tensor 2 x pipeline 2 x
# expert 2 ranks write it (tests/megatron_moe_fixture.py: mp_rank_TT_PPP_EEE, each expert rank's experts under
# local numbers, per-expert SequentialMLP keys or Transformer Engine's grouped-GEMM weightN keys, the router), and
#  * the conversion's debug-forward loss equals that of the Tessera checkpoint the weights came from (bit for bit)
#    and a float64 plain-PyTorch forward of Megatron's MoE layer over the checkpoint's weights
#    (tests/megatron_moe_reference.py; relative 1e-5), for softmax top-2 routing and for sigmoid routing with an
#    expert bias, groups, a scaling factor and a shared expert;
#  * the converted checkpoint trains on at expert-parallel size 2; train --load of the directory resumes the
#    weights and the experts' Adam moments (Megatron-Core's chained optimizer), losses as Tessera's own resume;
#  * what Tessera's MoE layer does not compute is refused by argument name; legacy files at an expert
#    tensor-parallel size other than the tensor-parallel size are refused, torch_dist ones (a shared expert split
#    over the tensor ranks, the routed experts whole) convert and resume to Tessera's own losses;
#  * torch_dist (PyTorch's DCP writer, tensor 2 x pipeline 2 x expert 4): the experts' sharded keys stacked over
#    layers and experts, or one key per expert (singleton_local_shards), convert to the same loss, bit for bit,
#    and train --load of the directory resumes with Adam's moments (optimizer.state.exp_avg.<key>) too;
#  * a DeepSeek-V3-style model (MLA, expert bias, shared expert, MTP) converts to Tessera's loss, and train --load of
#    its Megatron directory (the expert bias outside the chained optimizer) resumes with Tessera's own losses;
#  * --saver megatron writes the model at tensor 2 x pipeline 2 x expert 2, loaded by torch.load with the expected
#    keys, shapes and args, and read back to the same loss, bit for bit.
set -uo pipefail
tessera=${1:?usage: megatron_moe_convert_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib/checks.sh"
require_torch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tokens="3,17,5,9,40,1,0,22,31,7,8,12,2"

# forward DIR NAME: debug-forward of DIR's checkpoint into $work/NAME.out.safetensors; its output, with DIR's
# listing when it fails, in $forward_out. has_tracker DIR: DIR holds latest_checkpointed_iteration.txt; its listing
# (with times) in $listing.
forward() {
  forward_out=$("$tessera" debug-forward --load "$1" --tokens "$tokens" --out "$work/$2.out.safetensors" 2>&1) && return 0
  forward_out+=$'\n'"$1: $(ls -la --full-time "$1" 2>&1)"
  return 1
}
# debug_losses NAME...: the loss each `forward ... NAME` wrote, in one Python process (each import of torch
# costs seconds), separated by spaces.
debug_losses() {
  "$python" -c "import sys; sys.path.insert(0, '$here'); from hf_reference import read_safetensors
print(' '.join(repr(read_safetensors('$work/' + n + '.out.safetensors')['loss'].double().item()) for n in sys.argv[1:]))" "$@" 2>&1
}
has_tracker() {
  listing="$1: $(ls -la --full-time "$1" 2>&1)"
  [ -f "$1/latest_checkpointed_iteration.txt" ]
}

moe="--num-layers 4 --hidden-size 32 --num-attention-heads 4 --kv-channels 8 --group-query-attention
     --num-query-groups 2 --ffn-hidden-size 48 --swiglu --position-embedding-type rope --normalization RMSNorm
     --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 16 --max-position-embeddings 16
     --hidden-dropout 0 --attention-dropout 0 --mock-data --tokenizer-type NullTokenizer --vocab-size 40
     --make-vocab-size-divisible-by 8 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1
     --eval-iters 0 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 16"
out=$("$tessera" train $moe --train-iters 1 --save "$work/tessera" --save-interval 1 2>&1)
check "Tessera's MoE run saves: $out" $?
out=$("$python" -W ignore "$here/megatron_moe_fixture.py" "$work/tessera" "$work/sequential=sequential" \
      "$work/grouped=grouped" "$work/shared=sequential,moe_shared_expert_intermediate_size=32" \
      "$work/etp=sequential,expert_tensor_parallel_size=1" "$work/dist=dist" "$work/singleton=dist_singleton" \
      "$work/unchained=sequential,unchained" --reference-tokens "$tokens" 2>&1)
check "the fixtures: $out" $?
reference=$(sed -n "s|^$work/sequential: reference loss: ||p" <<<"$out")
forward "$work/tessera" tessera
check "debug-forward of Tessera's checkpoint: $forward_out" $?
for kind in sequential grouped dist singleton; do
  forward_out=
  out=$("$tessera" convert --loader megatron --load-dir "$work/$kind" --save-dir "$work/$kind.tessera" 2>&1) &&
    forward "$work/$kind.tessera" "$kind"
  check "$kind: convert and debug-forward: $out ${forward_out:-}" $?
done
losses=$(debug_losses tessera sequential grouped dist singleton)
read -r expected sequential grouped dist singleton <<<"$losses"
[ -n "$expected" ] && [ "$sequential" = "$expected" ] && [ "$grouped" = "$expected" ] && [ "$dist" = "$expected" ] &&
  [ "$singleton" = "$expected" ]
check "the converted losses (per-expert keys, grouped GEMM, torch_dist stacked and singleton) equal Tessera's own: $losses" $?
# against_reference NAME "LOSS (margin)": NAME's converted loss equals the float64 PyTorch forward of Megatron's MoE
# layer (tests/megatron_moe_reference.py) over the checkpoint's weights, relative 1e-5.
against_reference() {
  "$python" - "$here" "$work/$1.out.safetensors" "$2" <<'PY' 2>&1
import sys
sys.path.insert(0, sys.argv[1])
from hf_reference import read_safetensors
loss = read_safetensors(sys.argv[2])["loss"].double().item()
ref, margin = float(sys.argv[3].split()[0]), sys.argv[3].split(" ", 1)[1]
rel = abs(loss - ref) / abs(ref)
print(f"tessera loss {loss:.9e}, float64 PyTorch reference {ref:.9e}, relative difference {rel:.2e} {margin}")
sys.exit(0 if rel <= 1e-5 else 1)
PY
}
out=$(against_reference sequential "$reference")
check "softmax top-2 routing: the converted loss equals the float64 PyTorch reference: $out" $?
echo "softmax top-2: $out"
grep -q '"moe_ffn_hidden_size": *16' "$work/grouped.tessera/iter_0000001/index.json"
check "the MoE configuration comes from the saved args" $?
if command -v mpirun >/dev/null; then
  out=$(OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1 mpirun --oversubscribe --allow-run-as-root -np 2 \
        "$tessera" train $moe --expert-model-parallel-size 2 --train-iters 2 --load "$work/grouped.tessera" \
        --no-load-optim 2>&1)
  [ $? -eq 0 ] && grep -qF "iteration        2/       2 |" <<<"$out"
  check "the conversion trains on at expert-parallel size 2: $out" $?
fi

# Sigmoid routing with an expert bias (added for the selection only; nonzero after a step of its updates), two
# groups keeping one, a scaling factor and a shared expert, checked the same way against the reference.
sigmoid="--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-num-groups 2
         --moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5 --moe-shared-expert-intermediate-size 32
         --moe-router-load-balancing-type none"
out=$("$tessera" train $moe $sigmoid --train-iters 1 --save "$work/sig_tessera" --save-interval 1 2>&1)
check "the sigmoid-routed MoE run saves: $out" $?
out=$("$python" -W ignore "$here/megatron_moe_fixture.py" "$work/sig_tessera" --reference-tokens "$tokens" \
      "$work/sig=sequential,moe_router_score_function='sigmoid',moe_router_enable_expert_bias=True,moe_router_num_groups=2,moe_router_group_topk=1,moe_router_topk_scaling_factor=2.5,moe_shared_expert_intermediate_size=32,moe_router_load_balancing_type='none'" 2>&1)
check "the sigmoid-routed fixture: $out" $?
reference=$(sed -n "s|^$work/sig: reference loss: ||p" <<<"$out")
forward_out=
out=$("$tessera" convert --loader megatron --load-dir "$work/sig" --save-dir "$work/sig.tessera" 2>&1) &&
  forward "$work/sig.tessera" sig
check "sigmoid: convert and debug-forward: $out ${forward_out:-}" $?
out=$(against_reference sig "$reference")
check "sigmoid routing, expert bias, groups, scaling, shared expert: the converted loss equals the float64 PyTorch reference: $out" $?
echo "sigmoid, expert bias, shared expert: $out"

# torch_dist at an expert tensor-parallel size (1) other than the tensor-parallel size (2), with the shared expert
# split over the tensor ranks and each routed expert whole: its global keys convert to Tessera's loss, bit for
# bit, and train --load resumes with Adam's moments to Tessera's own losses (the legacy files' refusal: below).
sig_sets="moe_router_score_function='sigmoid',moe_router_enable_expert_bias=True,moe_router_num_groups=2,moe_router_group_topk=1,moe_router_topk_scaling_factor=2.5,moe_shared_expert_intermediate_size=32,moe_router_load_balancing_type='none'"
out=$("$python" -W ignore "$here/megatron_moe_fixture.py" "$work/sig_tessera" \
      "$work/sig_etp=dist,expert_tensor_parallel_size=1,$sig_sets" 2>&1)
check "the torch_dist fixture at expert tensor-parallel size 1: $out" $?
out=$("$tessera" convert --loader megatron --load-dir "$work/sig_etp" --save-dir "$work/sig_etp.tessera" 2>&1)
check "etp 1: convert: $out" $?
forward "$work/sig_etp.tessera" sig_etp
check "etp 1: debug-forward of the conversion: $forward_out" $?
forward "$work/sig_tessera" sig_tessera
check "etp 1: debug-forward of Tessera's checkpoint: $forward_out" $?
losses=$(debug_losses sig_tessera sig_etp)
read -r sig_expected sig_converted <<<"$losses"
[ -n "$sig_expected" ] && [ "$sig_converted" = "$sig_expected" ]
check "etp 1: the converted loss equals Tessera's own: $losses" $?

# train --load of the Megatron directory itself carries Adam's moments (legacy: Megatron-Core's chained [dense,
# experts] optimizer state dicts of every expert rank's file; torch_dist: optimizer.state.exp_avg.<key>): the
# losses of Tessera resuming its own checkpoint.
losses() { sed -nE 's/.*iteration +([0-9]+)\/.*lm loss: ([^ ]+) .*/\1:\2/p' <<<"$1" | tr '\n' ' '; }
ref=$("$tessera" train $moe --train-iters 3 --load "$work/tessera" 2>&1)
check "Tessera resumes its own MoE checkpoint: $ref" $?
for kind in sequential grouped dist; do
  out=$("$tessera" train $moe --train-iters 3 --load "$work/$kind" 2>&1)
  check "$kind: train --load of the MoE Megatron directory: $out" $?
  [ -n "$(losses "$ref")" ] && [ "$(losses "$out")" = "$(losses "$ref")" ]
  check "$kind: the resumed losses (with the experts' optimizer state) are Tessera's own: $(losses "$out") vs $(losses "$ref")" $?
done
sigmoid_losses() { sed -nE 's/.*iteration +([0-9]+)\/.*lm loss: ([^ ]+) .*/\1:\2/p' <<<"$1" | tr '\n' ' '; }
ref=$("$tessera" train $moe $sigmoid --train-iters 3 --load "$work/sig_tessera" 2>&1)
check "Tessera resumes its own sigmoid-routed checkpoint: $ref" $?
out=$("$tessera" train $moe $sigmoid --train-iters 3 --load "$work/sig_etp" 2>&1)
check "etp 1: train --load of the torch_dist directory: $out" $?
[ -n "$(sigmoid_losses "$ref")" ] && [ "$(sigmoid_losses "$out")" = "$(sigmoid_losses "$ref")" ]
check "etp 1: the resumed losses (the shared expert, the expert bias, Adam's moments) are Tessera's own: $(sigmoid_losses "$out") vs $(sigmoid_losses "$ref")" $?
expect_failure "mp_rank_00_000_000/model_optim_rng.pt: optimizer is a dict, not the list of two optimizer state dicts" \
  "$tessera" train $moe --train-iters 3 --load "$work/unchained"

# --saver megatron: the MoE model written as a tensor 2 x pipeline 2 x expert 2 job saves it (mp_rank_TT_PPP_EEE,
# each with the dense tensors and its experts under local numbers), read by torch.load with the expected keys,
# shapes and args, and back through --loader megatron to the same loss, bit for bit.
out=$("$tessera" convert --loader tessera --saver megatron --load-dir "$work/tessera" --save-dir "$work/saved" \
      --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 --target-expert-parallel-size 2 2>&1)
check "convert --saver megatron of the MoE model: $out" $?
out=$("$python" -W ignore - "$work/saved" "$here" <<'PY' 2>&1
import os, re, sys
import torch
root = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from megatron_rng_check import check_rng_state
files = sorted(os.listdir(os.path.join(root, "iter_0000001")))
assert files == [f"mp_rank_{t:02d}_{p:03d}_{e:03d}" for t in range(2) for p in range(2) for e in range(2)], files
for name in files:
    t, p, e = (int(x) for x in name.split("_")[2:])
    state = torch.load(os.path.join(root, "iter_0000001", name, "model_optim_rng.pt"), map_location="cpu")
    a, model = state["args"], state["model"]
    assert (a.num_experts, a.expert_model_parallel_size, a.moe_ffn_hidden_size, a.moe_router_topk) == (4, 2, 16, 2), vars(a)
    experts = {k: list(v.shape) for k, v in model.items() if ".mlp.experts." in k}
    want = {}
    for j in range(2):  # two layers per stage, each with local experts 0 and 1 of 16 / tp 2 rows of gate and of up
        for local in range(2):
            want[f"decoder.layers.{j}.mlp.experts.local_experts.{local}.linear_fc1.weight"] = [16, 32]
            want[f"decoder.layers.{j}.mlp.experts.local_experts.{local}.linear_fc2.weight"] = [32, 8]
        assert list(model[f"decoder.layers.{j}.mlp.router.weight"].shape) == [4, 32], name
    assert experts == want, (name, experts)
    assert ("embedding.word_embeddings.weight" in model) == (p == 0) and ("output_layer.weight" in model) == (p == 1), name
    check_rng_state(state["rng_state"], a.seed, p, t, ep_rank=e, where=name)  # each expert rank's tracker its own
print(f"torch {torch.__version__}: {len(files)} files with the expected expert keys, shapes, args and rng_state")
PY
)
check "torch.load of the written MoE checkpoint: $out" $?
echo "$out"
forward_out=
out=$("$tessera" convert --loader megatron --load-dir "$work/saved" --save-dir "$work/saved.tessera" 2>&1) &&
  forward "$work/saved.tessera" saved
check "the written MoE checkpoint converts back: $out ${forward_out:-}" $?
back=$(debug_losses saved)
[ -n "$expected" ] && [ "$back" = "$expected" ]
check "the round trip through Megatron's format keeps the loss: $back vs $expected" $?
expect_failure "num_experts (4) is not divisible by --target-expert-parallel-size 3" \
  "$tessera" convert --loader tessera --saver megatron --load-dir "$work/tessera" --save-dir "$work/x3" \
  --target-expert-parallel-size 3

expect_failure "holds decoder.layers.0.mlp.shared_experts.linear_fc1.weight (or its legacy language_model.* name), which this model has" \
  "$tessera" convert --loader megatron --load-dir "$work/shared" --save-dir "$work/x1"
expect_failure "args.expert_tensor_parallel_size set: an expert tensor-parallel size (1) other than the tensor-parallel size (2)" \
  "$tessera" convert --loader megatron --load-dir "$work/etp" --save-dir "$work/x2"

# A DeepSeek-V3-style model (multi-latent attention with the latents' norms, a dense first layer, sigmoid routing
# with expert bias and groups, a shared expert, one MTP module) trained one iteration by Tessera, written by PyTorch
# as a tensor 2 x pipeline 2 Megatron-Core job with Transformer Engine's names writes it
# (tests/megatron_deepseek_fixture.py: the MTP module and a copy of the word embeddings on the last stage): the
# conversion takes its configuration from the saved args and gives Tessera's loss (the MTP objective included).
source "$here/lib/deepseek_toy.sh"
ds="$deepseek_toy --q-lora-rank 24"
# Each step checked on its own with its output: one run found $work/ds without its tracker at the debug-forward
# after the fixture had read it (not reproduced), and the chained steps' discarded output could not say why.
out=$("$tessera" train $ds --train-iters 1 --save "$work/ds" --save-interval 1 2>&1)
check "a DeepSeek-V3-style model trains and saves: $out" $?
has_tracker "$work/ds"
check "DeepSeek-V3-style: the training run wrote its tracker: $listing" $?
forward "$work/ds" ds
check "DeepSeek-V3-style: debug-forward of Tessera's checkpoint: $forward_out" $?
out=$("$python" -W ignore "$here/megatron_deepseek_fixture.py" "$work/ds" "$work/ds_megatron" 2>&1)
check "the DeepSeek-V3-style fixture: $out" $?
out=$("$tessera" convert --loader megatron --load-dir "$work/ds_megatron" --save-dir "$work/ds.tessera" 2>&1)
check "DeepSeek-V3-style: convert: $out" $?
forward "$work/ds.tessera" ds_conv
check "DeepSeek-V3-style: debug-forward of the conversion: $forward_out" $?
has_tracker "$work/ds"
check "DeepSeek-V3-style: Tessera's checkpoint still has its tracker after the fixture and the conversion: $listing" $?
losses=$(debug_losses ds ds_conv)
read -r expected converted <<<"$losses"
[ -n "$expected" ] && [ "$converted" = "$expected" ]
check "DeepSeek-V3-style: the converted loss equals Tessera's own: $losses" $?
grep -q '"mtp_num_layers": *1' "$work/ds.tessera/iter_0000001/index.json" &&
  grep -q '"moe_shared_expert_intermediate_size": *16' "$work/ds.tessera/iter_0000001/index.json"
check "DeepSeek-V3-style: the MTP and shared-expert configuration comes from the saved args" $?
# train --load of the Megatron directory itself: the weights, the routers' expert bias (a buffer outside Megatron's
# optimizer, nonzero after the first step's update), Adam's moments of Megatron-Core's chained [dense, experts]
# optimizer (the first stage, without experts, holding an empty experts' one), the iteration and consumed samples:
# the next two iterations' losses, the MTP module's too, are those of Tessera resuming its own checkpoint.
ds_losses() { sed -nE 's/.*iteration +([0-9]+)\/.*consumed samples: +([0-9]+).*lm loss: ([^ ]+) .*mtp_1 loss: ([^ ]+) .*/\1:\2:\3:\4/p' <<<"$1" | tr '\n' ' '; }
ref=$("$tessera" train $ds --train-iters 3 --load "$work/ds" 2>&1)
check "DeepSeek-V3-style: Tessera resumes its own checkpoint: $ref" $?
out=$("$tessera" train $ds --train-iters 3 --load "$work/ds_megatron" 2>&1)
check "DeepSeek-V3-style: train --load of the Megatron directory: $out" $?
[ -n "$(ds_losses "$ref")" ] && [ "$(ds_losses "$out")" = "$(ds_losses "$ref")" ]
check "DeepSeek-V3-style: the resumed losses (iteration:consumed samples:lm:mtp) are Tessera's own: $(ds_losses "$out") vs $(ds_losses "$ref")" $?
# --saver megatron of it at tensor 2 x pipeline 2: Megatron-Core's keys and shapes under torch.load, and back.
out=$("$tessera" convert --loader tessera --saver megatron --load-dir "$work/ds" --save-dir "$work/ds_saved" \
      --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 2>&1) &&
  out=$("$python" -W ignore - "$work/ds_saved/iter_0000001" <<'PY' 2>&1
import os, sys
import torch
last = torch.load(os.path.join(sys.argv[1], "mp_rank_01_001", "model_optim_rng.pt"), map_location="cpu")
m, a = last["model"], last["args"]
assert (a.multi_latent_attention, a.q_lora_rank, a.mtp_num_layers, a.moe_shared_expert_intermediate_size,
        a.moe_layer_freq) == (True, 24, 1, 16, [0, 1]), vars(a)
want = {"embedding.word_embeddings.weight": [24, 32], "mtp.layers.0.eh_proj.weight": [16, 64],
        "mtp.layers.0.transformer_layer.self_attention.linear_q_up_proj.weight": [32, 24],
        "mtp.layers.0.transformer_layer.self_attention.linear_kv_down_proj.weight": [24, 32],
        "decoder.layers.0.self_attention.linear_proj.weight": [32, 24], "decoder.layers.0.mlp.router.expert_bias": [4],
        "decoder.layers.0.mlp.shared_experts.linear_fc1.weight": [16, 32]}
got = {k: list(m[k].shape) for k in want if k in m}
assert got == want, got
print(f"{len(m)} tensors with Megatron-Core's keys and shapes")
PY
)
check "DeepSeek-V3-style: convert --saver megatron, torch.load: $out" $?
forward_out=
out=$("$tessera" convert --loader megatron --load-dir "$work/ds_saved" --save-dir "$work/ds_saved.tessera" 2>&1) &&
  forward "$work/ds_saved.tessera" ds_back
check "DeepSeek-V3-style: the written checkpoint converts back: $out ${forward_out:-}" $?
back=$(debug_losses ds_back)
[ -n "$expected" ] && [ "$back" = "$expected" ]
check "DeepSeek-V3-style: the round trip through Megatron's format keeps the loss: $back vs $expected" $?

finish megatron_moe_convert_cli
