#!/usr/bin/env bash
# End-to-end checks of `tessera plan`: a train command line becomes a plan, the printed breakdown and
# Megatron-spelled throughput line, JSON and Chrome-trace outputs, --search on the 1T model, sizing,
# cluster files, and clear errors for bad input.
set -uo pipefail
tessera=${1:?usage: plan_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"

expect_error() { expect_failure "$2" "$tessera" plan $1; }  # expect_error "flags" "text of the message"

# PTD-P's 1T model with its Table 1 settings (A100-80GB, V = 51,200, s = 2048, full recomputation, fp16).
trillion="--num-layers 128 --hidden-size 25600 --num-attention-heads 160 --seq-length 2048
          --tokenizer-type NullTokenizer --vocab-size 51199 --make-vocab-size-divisible-by 128
          --micro-batch-size 1 --global-batch-size 3072 --recompute-granularity full --fp16
          --device A100-80GB --num-devices 3072"

# A plan for the paper's layout: memory table, breakdown, the training log's throughput field.
out=$("$tessera" plan $trillion --tensor-model-parallel-size 8 --pipeline-model-parallel-size 64 \
      --flops-formula ptdp --trace "$work/trace.json" 2>&1)
check "1T plan runs: $out" $?
grep -q "throughput per GPU (TFLOP/s/GPU): " <<<"$out"
check "the throughput line is spelled as the training log's: $out" $?
grep -q "fits in 80 GiB" <<<"$out"
check "tp8 pp64 fits in 80 GiB: $out" $?
for part in "compute" "tensor-parallel communication" "pipeline p2p" "pipeline bubble (simulated)" \
            "data-parallel reduction (exposed)" "optimizer" "theory (p-1)/(v*m)" "MFU" "tokens per second"; do
  grep -qF "$part" <<<"$out"
  check "the plan prints '$part'" $?
done
tflops=$(sed -n 's/^throughput per GPU (TFLOP\/s\/GPU): //p' <<<"$out")
awk -v x="$tflops" 'BEGIN { exit !(x > 163 * 0.9 && x < 163 * 1.1) }'
check "1T tp8 pp64 within 10% of PTD-P's 163 TFLOP/s/GPU (got $tflops)" $?

# The trace is JSON with one track per pipeline rank.
python3 - "$work/trace.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
tracks = [e for e in t["traceEvents"] if e.get("name") == "thread_name"]
spans = [e for e in t["traceEvents"] if e.get("ph") == "X"]
assert len(tracks) == 64, len(tracks)
assert {e["cat"] for e in spans} >= {"forward", "backward", "p2p", "idle", "reduction", "optimizer"}, {e["cat"] for e in spans}
assert all(e["dur"] > 0 and e["ts"] >= 0 for e in spans)
EOF
check "the Chrome trace has 64 tracks and every kind of span" $?

# JSON output parses and agrees with the text.
"$tessera" plan $trillion --tensor-model-parallel-size 8 --pipeline-model-parallel-size 64 --flops-formula ptdp \
  --json > "$work/plan.json" 2>&1
check "--json runs" $?
python3 - "$work/plan.json" "$tflops" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["fits"] and p["layout"]["pipeline_model_parallel_size"] == 64
t = p["iteration_seconds"]
parts = sum(v for k, v in t.items() if k != "total")
assert abs(parts - t["total"]) < 1e-9 * t["total"], (parts, t["total"])
assert abs(p["throughput_per_gpu_tflops"] - float(sys.argv[2])) < 0.06
assert len(p["memory_per_rank_bytes"]) == 64
EOF
check "the JSON plan is consistent" $?

# Search: the paper's tp8 pp64 first (or within 5% of the first), layouts that do not fit rejected.
out=$("$tessera" plan $trillion --search --flops-formula ptdp --top 3 2>&1)
check "--search runs: $out" $?
first=$(awk '$1 == "1" { print $2, $3 }' <<<"$out")
grep -q "memory: " <<<"$out" && grep -q "GiB on pipeline stage" <<<"$out"
check "--search reports the layouts rejected for memory: $out" $?
best=$(awk '$1 == "1" { print $7 }' <<<"$out")
paper=$("$tessera" plan $trillion --search --flops-formula ptdp --top 1000 2>&1 | awk '$2 == "tp8" && $3 == "pp64" { print $7; exit }')
awk -v b="$best" -v p="$paper" 'BEGIN { exit !(p != "" && p >= 0.95 * b) }'
check "tp8 pp64 ($paper) is within 5% of the first layout ($first, $best)" $?

# A small model on this kind of machine, with a cluster file overriding a built-in device.
small="--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 128 --tokenizer-type NullTokenizer
       --vocab-size 255 --micro-batch-size 4 --global-batch-size 16"
echo '{"device": {"base": "cpu", "memory_bytes": 4e9, "devices_per_node": 4}, "num_devices": 4}' > "$work/cluster.json"
out=$("$tessera" plan $small --cluster "$work/cluster.json" --tensor-model-parallel-size 2 --sequence-parallel 2>&1)
check "plan with --cluster: $out" $?
grep -q "layout: tensor 2, pipeline 1, data 2" <<<"$out"
check "the cluster file's 4 devices give dp 2: $out" $?

# Context parallelism (issue 37): the plan prices the ring; cp counts in the devices (dp = 4 / (tp 1 x cp 2)).
out=$("$tessera" plan $small --seq-length 1024 --context-parallel-size 2 --cluster "$work/cluster.json" 2>&1)
check "plan with --context-parallel-size: $out" $?
grep -q "layout: tensor 1, pipeline 1, data 2" <<<"$out" && grep -q "context parallel 2: each rank holds 512 tokens" <<<"$out" &&
  grep -q "context-parallel ring (exposed)" <<<"$out"
check "the cp plan prints its tokens per rank and the ring's exposed time: $out" $?

# Sizing: a compute budget gives a Chinchilla-optimal model, its loss, layout and time.
out=$("$tessera" plan $small --seq-length 2048 --global-batch-size 1024 --bf16 --recompute-activations --sequence-parallel \
      --device H100-SXM --num-devices 1024 --compute-budget 5.76e23 2>&1)
check "--compute-budget runs: $out" $?
grep -q "predicted loss" <<<"$out" && grep -q "time to train:" <<<"$out"
check "--compute-budget prints the loss and the time to train: $out" $?

# Mixture of experts: the expert layout is printed, its all-to-all time is a part of the iteration, the
# search goes over ep (and keeps a fixed one), and the trainer's expert rules apply.
moe="$small --micro-batch-size 1 --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 512 --device A100-80GB --num-devices 8"
out=$("$tessera" plan $moe --expert-model-parallel-size 4 2>&1)
check "MoE plan runs: $out" $?
grep -q "expert layout: expert tensor 1, expert parallel 4, expert data 2 (alltoall dispatcher)" <<<"$out" &&
  grep -q "expert-parallel communication" <<<"$out" && grep -q "experts: 4 of 4 layers are MoE" <<<"$out"
check "the MoE plan prints the expert layout and the expert-parallel time: $out" $?
"$tessera" plan $moe --expert-model-parallel-size 4 --json > "$work/moe.json" 2>&1
check "MoE --json runs" $?
python3 - "$work/moe.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
l = p["layout"]
assert (l["expert_model_parallel_size"], l["expert_tensor_parallel_size"], l["expert_data_parallel_size"]) == (4, 1, 2), l
t = p["iteration_seconds"]
assert t["expert_parallel_communication"] > 0, t
assert abs(sum(v for k, v in t.items() if k != "total") - t["total"]) < 1e-9 * t["total"], t
EOF
check "the MoE JSON plan has the expert layout and consistent times" $?
out=$("$tessera" plan $moe --search --top 100 2>&1)
check "MoE --search runs: $out" $?
grep -q "ep comm" <<<"$out" && grep -q " ep8 etp1 " <<<"$out" && grep -q " ep1 etp1 " <<<"$out"
check "the MoE search tries ep from 1 to 8 and prints the expert-parallel share: $out" $?
out=$("$tessera" plan $moe --search --top 100 --expert-model-parallel-size 2 2>&1)
check "MoE --search with a fixed ep runs: $out" $?
! grep -E "^ +[0-9]+ +tp" <<<"$out" | grep -qv " ep2 "
check "a fixed --expert-model-parallel-size is the only ep searched: $out" $?
expect_error "$moe --expert-model-parallel-size 3" "--expert-model-parallel-size=3"
expect_error "$moe --tensor-model-parallel-size 2" "needs --sequence-parallel with MoE"
expect_error "$moe --search --expert-model-parallel-size x" "--expert-model-parallel-size=x: must be a positive integer"
expect_error "$moe --compute-budget 1e21" "leave out --num-experts"
# MoE with context parallelism (issue 37): ep folds over cp x dp; a capacity is refused with cp.
out=$("$tessera" plan $moe --context-parallel-size 2 --expert-model-parallel-size 4 2>&1)
check "MoE plan with --context-parallel-size runs: $out" $?
grep -q "context parallel 2: each rank holds 64 tokens" <<<"$out" &&
  grep -q "expert layout: expert tensor 1, expert parallel 4, expert data 2" <<<"$out"
check "the MoE cp plan prints its tokens per rank and the expert layout: $out" $?
expect_error "$moe --context-parallel-size 2 --moe-expert-capacity-factor 1.0" "--moe-expert-capacity-factor=1: cannot be combined with --context-parallel-size=2"

# Bad input: named flags, values and rules.
expect_error "$small --device TPU-v9" "--device=TPU-v9: unknown device"
expect_error "$small --flops-formula kaplan" "--flops-formula=kaplan: must be megatron or ptdp"
expect_error "$small --num-attention-heads 7" "--hidden-size=256: must be divisible by --num-attention-heads=7"
expect_error "$small --pipeline-model-parallel-size 3" "--num-layers=4: must be divisible by --pipeline-model-parallel-size=3"
expect_error "$small --num-devices 4 --global-batch-size 6" "--global-batch-size=6"
expect_error "$small --recompute-granularity some" "--recompute-granularity=some"
expect_error "$small --cluster $work/missing.json" "missing.json: cannot open the file"
echo '{"device": {"base": "cpu", "memory_bandwidth": "fast"}}' > "$work/bad.json"
expect_error "$small --cluster $work/bad.json" "\"memory_bandwidth\": expected a number"
expect_error "$small --no-such-flag 1" "--no-such-flag"

# TeraPipe's token-level pipeline priced on its GPT-3 175B layout (384 V100s: batch 2, tp 8, pp 48).
gpt3="--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048
      --tokenizer-type NullTokenizer --vocab-size 50257 --micro-batch-size 1 --global-batch-size 2 --fp16
      --device V100-32GB --num-devices 384 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 48"
out=$("$tessera" plan $gpt3 --pipeline-token-slices auto 2>&1)
check "the token-sliced plan runs: $out" $?
speedup=$(grep -oE "unsliced \(GPipe over 2 micro-batches on 48 stages\): [0-9.]+x" <<<"$out" | grep -oE "[0-9.]+x$" | tr -d x)
awk -v x="$speedup" 'BEGIN { exit !(x > 1) }'
grep -qF "key/value caches: 24 MiB per micro-batch on a stage" <<<"$out"
check "the plan prints the caches' memory: $out" $?
check "token slicing shortens the 48-stage pipeline of 2 micro-batches (${speedup}x): $out" $?
"$tessera" plan $gpt3 --pipeline-token-slices 1024,1024 --json >"$work/sliced.json" 2>&1
python3 - "$work/sliced.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))["token_slicing"]
# keys and values of 2048 tokens x 12 query groups per tensor rank x 128 channels x 2 layers per stage, fp16
cache = 2 * 2048 * 12 * 128 * 2 * 2
sys.exit(0 if s["slices"] == [1024, 1024] and s["pipeline_seconds"] < s["unsliced_pipeline_seconds"] and
         s["kv_cache_bytes_per_micro_batch"] == cache else 1)
EOF
check "--json has the slicing and both latencies: $(head -c 300 "$work/sliced.json")" $?
# The plan simulates 1F1B over the slices: its layout has them and its trace draws each slice's ops.
"$tessera" plan $gpt3 --pipeline-token-slices 4 --json --trace "$work/sliced_trace.json" >"$work/sliced4.json" 2>&1
python3 - "$work/sliced4.json" "$work/sliced_trace.json" <<'EOF'
import json, sys
plan, trace = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
names = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
sys.exit(0 if plan["layout"]["token_slices"] == [512] * 4 and {"F0.0s3", "B1.0s1"} <= names else 1)
EOF
check "the sliced plan's layout and Chrome trace show the slices" $?
# --search plans each pipelined layout with the slices TeraPipe's dynamic program picks as well.
out=$("$tessera" plan ${gpt3/--tensor-model-parallel-size 8 --pipeline-model-parallel-size 48/} --search --top 3 2>&1)
grep -qE "^  1 +tp[0-9]+ pp[0-9]+ .* slices=[0-9x,]+ " <<<"$out"
check "--search ranks a token-sliced layout first for 2 sequences on 384 V100s: $out" $?
[ "$(grep -E '^  (rank|[0-9]+) ' <<<"$out" | awk '{ print index($0, "|") }' | sort -u | wc -l)" -eq 1 ]
check "--search: a sliced layout's row keeps the columns of the others: $out" $?
# The rejected examples are whole layouts (micro-batch, virtual stages, recomputation), not tp and pp alone.
grep -qE "^    tp[0-9]+ pp[0-9]+ dp[0-9]+ v[0-9]+ mbs[0-9]+ gbs[0-9]+ .*recompute=[a-z]+.*: " <<<"$out"
check "--search: the rejected examples show their whole layout: $out" $?
# A tiny model: parameters and memory in units that show them (0.000121B parameters and 0 GiB before).
out=$("$tessera" plan --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 40 \
      --micro-batch-size 2 2>&1)
grep -qE "^model: [0-9.]+K parameters" <<<"$out" && grep -qE "^  0 +[0-9.]+ KiB +[0-9.]+ KiB" <<<"$out"
check "a tiny model's plan: K parameters, KiB of memory: $out" $?
expect_error "$gpt3 --pipeline-token-slices 1000,1000" "the slice lengths sum to 2000, not --seq-length=2048"
expect_error "$gpt3 --pipeline-token-slices auto --search" "--search and sizing plan token slices by themselves"

# Ouroboros priced on 2 pipeline ranks (K = 3 modules): the forward chain, every rank's backward at once,
# the copies its delays keep, beside 1F1B on the same ranks.
ouro="--num-layers 6 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --tokenizer-type NullTokenizer
      --vocab-size 32000 --micro-batch-size 1 --global-batch-size 8 --pipeline-model-parallel-size 2
      --pipeline-schedule ouroboros --device A100-80GB"
out=$("$tessera" plan $ouro 2>&1)
grep -q "K = 3 modules on 2 pipeline ranks" <<<"$out" && grep -q "1F1B on the same 2 ranks: " <<<"$out"
check "plan --pipeline-schedule ouroboros prices the schedule beside 1F1B: $out" $?
"$tessera" plan $ouro --json > "$work/ouro.json" 2>&1
python3 - "$work/ouro.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
chain = sum(j["module_forward_seconds"])
slowest = max(b + o for b, o in zip(j["rank_backward_seconds"], j["rank_optimizer_seconds"]))
ok = (j["modules"] == 3 and chain < j["forward_chain_seconds"] and j["one_f_one_b_iteration_seconds"] > 0 and
      abs(j["iteration_seconds"] - (j["forward_chain_seconds"] + j["error_gradient_seconds"] + slowest)) < 1e-12 and
      j["weight_copy_bytes"][0] > j["weight_copy_bytes"][1] > 0)
sys.exit(0 if ok else 1)
EOF
check "--json has the Ouroboros price's parts, adding up: $(head -c 400 "$work/ouro.json")" $?

# A GPT-3 script's sample-based flags (--train-samples, a batch-size ramp): the plan is of the final batch.
big=${trillion/--global-batch-size 3072/--global-batch-size 1536}  # at 1024 GPUs: dp 2, which every batch of the ramp splits over
out=$("$tessera" plan ${big/--num-devices 3072/--num-devices 1024} --tensor-model-parallel-size 8 \
      --pipeline-model-parallel-size 64 --train-samples 146484375 --rampup-batch-size 16 16 5859375 \
      --lr-decay-samples 126953125 --lr-warmup-samples 183105 2>&1)
check "a plan from sample-based flags with a batch-size ramp runs: $out" $?

# A tiny --ddp-bucket-size (or a huge model) is planned at once: one simulated collective per bucket took
# GPT-2 1.5B in buckets of 1 element 16 GB and minutes. Under a 2 GB address-space limit and 20 s.
out=$(ulimit -v 2000000; timeout 20 "$tessera" plan --num-layers 48 --hidden-size 1600 --num-attention-heads 25 \
      --seq-length 1024 --micro-batch-size 1 --global-batch-size 64 --vocab-size 50257 --num-devices 8 \
      --ddp-bucket-size 1 2>&1)
[ $? -eq 0 ] && grep -q "tokens per second" <<<"$out"
check "--ddp-bucket-size 1 plans quickly: $(tail -3 <<<"$out")" $?
expect_error "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --global-batch-size 8 --vocab-size 100 --num-devices -8" "--num-devices: -8 must be an integer >= 0"

# Zero bubble: the plan prices B and W apart; ZB-H1 and ZB-V leave less bubble than 1F1B on the same model.
zb="--num-layers 16 --hidden-size 2048 --num-attention-heads 16 --seq-length 1024 --micro-batch-size 1
    --global-batch-size 8 --vocab-size 8192 --device A100-80GB --num-devices 4 --pipeline-model-parallel-size 4"
bubble() { awk '/pipeline bubble \(simulated\)/ { print $(NF-2) }' <<<"$1"; }
out=$("$tessera" plan $zb 2>&1); plain=$(bubble "$out")
out=$("$tessera" plan $zb --enable-zero-bubble 2>&1)
check "ZB-H1 plan runs: $out" $?
h1=$(bubble "$out")
grep -q "zero bubble: ZB-H1" <<<"$out" && grep -qF "theory (the schedule at F = B = W)" <<<"$out"
check "the ZB-H1 plan names its schedule and theory: $out" $?
out=$("$tessera" plan $zb --zero-bubble-v-schedule 2>&1)
check "ZB-V plan runs: $out" $?
v=$(bubble "$out")
grep -q "zero bubble: ZB-V" <<<"$out"
check "the ZB-V plan names its schedule: $out" $?
awk -v a="$plain" -v b="$h1" -v c="$v" 'BEGIN { exit !(a > 0 && b < a && c < b) }'
check "bubble 1F1B $plain ms > ZB-H1 $h1 ms > ZB-V $v ms" $?
expect_error "$zb --zero-bubble-v-schedule --num-layers 12" "--zero-bubble-v-schedule"

finish plan_cli
