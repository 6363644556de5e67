#!/usr/bin/env bash
# Multi-Latent Attention (issue 53) as a user runs it: `tessera train --multi-latent-attention` with
# DeepSeek-V3's form (compressed query, latent norms, YaRN) learns the mock data (its loss falls far below
# ln(vocab)); its checkpoint names the parameters as Megatron-Core does and resumes at tp 2 with the
# uninterrupted run's losses; generation from it (the compressed-latent cache) gives the same ids at tp 1
# and 2; cp 2 (ring attention) trains to the same losses; bad values and combinations are refused before any
# work, naming the flag.
set -uo pipefail
tessera=${1:?usage: mla_cli.sh path/to/tessera}
work=$(mktemp -d)
source "$(dirname "$0")/lib/checks.sh"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
mpi() { local n=$1; shift; mpirun --oversubscribe --allow-run-as-root -np "$n" "$@"; }
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 8 --lr 3e-3
       --log-interval 5 --eval-iters 0 --seed 7 --make-vocab-size-divisible-by 32 --train-iters 60
       --hidden-dropout 0 --attention-dropout 0 --normalization RMSNorm --position-embedding-type rope
       --multi-latent-attention --q-lora-rank 16 --kv-lora-rank 8 --qk-head-dim 8 --qk-pos-emb-head-dim 4
       --v-head-dim 8 --qk-layernorm --rope-type yarn --rotary-scaling-factor 4 --mscale 1.0 --mscale-all-dim 1.0
       --yarn-original-max-position-embeddings 16)

# "iteration lm-loss" per log line.
losses() { grep -oE "iteration +[0-9]+/ +60 .*lm loss: [^|]*" "$1" | sed -E 's/.*iteration +([0-9]+)\/.*lm loss: (.*) /\1 \2/'; }
same_losses() {  # two loss lists agree on their common iterations to 1e-5 relative
  python3 - "$1" "$2" <<'PY'
import sys
a = dict(l.split() for l in sys.argv[1].splitlines() if l.strip())
b = dict(l.split() for l in sys.argv[2].splitlines() if l.strip())
common = [k for k in a if k in b]
sys.exit(0 if common and all(abs(float(a[k]) - float(b[k])) <= 1e-5 * abs(float(b[k])) for k in common) else 1)
PY
}

"$tessera" train "${model[@]}" >"$work/single.log" 2>&1
check "MLA trains: $(tail -3 "$work/single.log")" $?
last=$(losses "$work/single.log" | tail -1 | awk '{print $2}')
awk -v l="$last" 'BEGIN { exit !(l != "" && l < 0.5 * log(60)) }'
check "MLA learns the mock data: lm loss $last at iteration 60, ln(60) = 4.09: $(losses "$work/single.log" | tr '\n' ' ')" $?

"$tessera" train "${model[@]}" --save "$work/ckpt" --save-interval 30 --exit-interval 30 >"$work/save.log" 2>&1
check "MLA saves at iteration 30: $(tail -3 "$work/save.log")" $?
grep -aq "decoder.layers.1.self_attention.linear_kv_down_proj.weight" -r "$work/ckpt"
check "the checkpoint names Megatron-Core's MLA parameters" $?
mpi 2 "$tessera" train "${model[@]}" --tensor-model-parallel-size 2 --sequence-parallel --load "$work/ckpt" \
  >"$work/resume.log" 2>&1
check "tp 2 resumes it: $(tail -3 "$work/resume.log")" $?
same_losses "$(losses "$work/resume.log" | awk '$1 > 30')" "$(losses "$work/single.log" | awk '$1 > 30')"
check "resumed at tp 2: the uninterrupted losses: $(losses "$work/resume.log" | tr '\n' ' ')" $?

# Generation from the checkpoint (the compressed-latent cache): greedy ids, the same at tp 2.
one=$("$tessera" generate --load "$work/ckpt" --prompt "3 5 7" --tokens-to-generate 8 --temperature 0 2>"$work/gen.err")
check "MLA generates: '$one' $(tail -2 "$work/gen.err")" $?
[ "$(wc -w <<<"$one")" -eq 11 ]
check "the prompt and 8 generated ids: '$one'" $?
two=$(mpi 2 "$tessera" generate --load "$work/ckpt" --tensor-model-parallel-size 2 --prompt "3 5 7" \
      --tokens-to-generate 8 --temperature 0 2>"$work/gen2.err")
[ -n "$one" ] && [ "$one" = "$two" ]
check "tp 2 generates what one process does: '$one' vs '$two' $(tail -2 "$work/gen2.err")" $?

expect_failure "--qk-pos-emb-head-dim=5: must be even (RoPE rotates pairs of dimensions)" \
  "$tessera" train "${model[@]}" --qk-pos-emb-head-dim 5
# Context parallelism: MLA's heads around the ring at cp 2 give the single process's losses.
mpi 2 "$tessera" train "${model[@]}" --context-parallel-size 2 --exit-interval 10 >"$work/cp.log" 2>&1
check "cp 2 trains MLA: $(tail -3 "$work/cp.log")" $?
same_losses "$(losses "$work/cp.log")" "$(losses "$work/single.log" | awk '$1 <= 10')"
check "at cp 2: the single process's losses: $(losses "$work/cp.log" | tr '\n' ' ')" $?
without_mla=()
for f in "${model[@]}"; do [ "$f" != --multi-latent-attention ] && without_mla+=("$f"); done
expect_failure "--rope-type=yarn: needs --multi-latent-attention" "$tessera" train "${without_mla[@]}"

# `tessera plan` prices MLA (the latent projections, the shared RoPE key, the heads' GEMMs and records):
# DeepSeek-V3's attention in 64 dense layers (the planner splits layers evenly) at tp 8 x pp 16 on H100s.
# Per layer MLA has 1536*7168 + 128*192*1536 + 576*7168 + 128*256*512 + 128*128*7168 = 187.0M weights where
# multi-head attention has 4*7168^2 = 205.5M: 39.2B parameters in all against 40.4B.
v3="--num-layers 64 --hidden-size 7168 --num-attention-heads 128 --seq-length 4096 --tokenizer-type NullTokenizer
    --vocab-size 129280 --micro-batch-size 1 --global-batch-size 1024 --normalization RMSNorm --swiglu
    --ffn-hidden-size 18432 --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights
    --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64
    --v-head-dim 128 --qk-layernorm --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0
    --recompute-granularity full --bf16 --device H100-SXM --num-devices 1024"
out=$("$tessera" plan $v3 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 2>&1)
check "an MLA plan runs: $out" $?
grep -q "throughput per GPU (TFLOP/s/GPU): " <<<"$out"
check "it prints the throughput: $out" $?
grep -q "model: 39.2B parameters" <<<"$out"
check "it counts MLA's parameters (39.2B, not multi-head attention's 40.4B): $(head -1 <<<"$out")" $?

finish mla_cli
