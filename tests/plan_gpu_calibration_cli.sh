#!/usr/bin/env bash
# `tessera plan` with a GPU cluster calibrated from measurements (issue 56): cluster files with NCCL bus
# bandwidths and a measured one-GPU step, merged in order after --device, say what they replaced; the
# flag form of the step; bad fields refused naming the file and the field; bench_collectives' NCCL path
# refused by name where it cannot run (no CUDA build, no GPU or no NCCL: this machine).
set -uo pipefail
tessera=$(realpath "${1:?usage: plan_gpu_calibration_cli.sh path/to/tessera}")
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

gpt="--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
     --vocab-size 50257 --micro-batch-size 8 --global-batch-size 256 --bf16"
cat > nccl.json <<'JSON'
{"nccl": {"intra_node_busbw_gbps": 300, "intra_node_latency_us": 5, "inter_node_busbw_gbps": 160,
          "inter_node_ranks_per_node": 8}}
JSON
cat > step.json <<'JSON'
{"measured_step": {"num_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "seq_length": 1024,
                   "padded_vocab_size": 50304, "micro_batch_size": 8, "precision": "bf16",
                   "throughput_per_gpu_tflops": 150, "source": "a test"}}
JSON

table=$("$tessera" plan --device H100-SXM $gpt --tensor-model-parallel-size 2 --num-devices 16 2>&1)
check "plan on the table's H100 exits 0: $table" $?
out=$("$tessera" plan --device H100-SXM --cluster nccl.json --cluster step.json $gpt --tensor-model-parallel-size 2 \
      --num-devices 16 2>&1)
check "plan with the two fragments exits 0: $out" $?
grep -qF "calibrated: intra-node links: NCCL all-reduce busbw 300.0 GB/s (table: 360.0)" <<<"$out"
check "the plan says which link the NCCL measurement replaced: $out" $?
grep -qF "over nodes of 8 GPUs = 20.00 GB/s per GPU (table: 50.00)" <<<"$out"
check "the inter-node busbw becomes the per-GPU share: $out" $?
grep -qE "calibrated: GEMM efficiency: 0\.[0-9]+ \(table: 0\.700\)" <<<"$out"
check "the plan says the fitted efficiency: $out" $?
[ -n "$(grep -m1 '^  total ' <<<"$out")" ] && [ "$(grep -m1 '^  total ' <<<"$out")" != "$(grep -m1 '^  total ' <<<"$table")" ]
check "the calibrated plan predicts another iteration time than the table's" $?

json=$("$tessera" plan --device H100-SXM --cluster nccl.json $gpt --measured-tflops-per-gpu 150 --json 2>&1)
python3 -c 'import json, sys; j = json.loads(sys.argv[1]); c = j["calibrated"]; sys.exit(0 if len(c) == 3 and "GEMM efficiency" in c[2] else 1)' "$json"
check "--measured-tflops-per-gpu fits this model's efficiency; --json lists the calibration: $json" $?

echo '{"nccl": {"intra_node_busbw": 300}}' > typo.json
expect_failure "--cluster=typo.json: \"nccl\" field \"intra_node_busbw\": unknown" \
  "$tessera" plan --device H100-SXM --cluster typo.json $gpt
echo '{"measured_step": {"num_layers": 12}}' > short.json
expect_failure "--cluster=short.json: \"measured_step\": field \"hidden_size\" is missing" \
  "$tessera" plan --device H100-SXM --cluster short.json $gpt
expect_failure "give one of them" "$tessera" plan --device H100-SXM $gpt --measured-iteration-ms 100 --measured-tflops-per-gpu 3
expect_failure "a --cluster file already has a \"measured_step\"" \
  "$tessera" plan --device H100-SXM --cluster step.json $gpt --measured-iteration-ms 100

bench=$(dirname "$tessera")/bench_collectives
if [ -x "$bench" ]; then
  out=$("$bench" --backend nccl --op all_reduce --max-bytes 4096 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "note: bench_collectives --backend nccl ran here (a GPU and NCCL are present): $out"
  else
    grep -qE -- "--backend nccl: (this bench_collectives was built without CUDA|no CUDA device|.*libnccl)" <<<"$out"
    check "bench_collectives --backend nccl without a GPU or NCCL is refused by name: $out" $?
  fi
  expect_failure "--cluster-output=x.json: writes NCCL's bus bandwidths: give --backend nccl" \
    "$bench" --cluster-output x.json
  expect_failure "--op=allreduce: not a collective" "$bench" --op allreduce
else
  echo "note: no bench_collectives beside $tessera (TESSERA_BUILD_BENCH off): its checks not run"
fi
finish plan_gpu_calibration_cli
