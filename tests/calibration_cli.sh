#!/usr/bin/env bash
# `tessera plan --calibrate` and the plan line of `tessera train`: the calibration measures the run's
# precision and records which model and machine it measured; train uses it only for that run, says
# which fields differ otherwise, and its plan line describes the run's own layout, precision and
# optimizer.
set -uo pipefail
tessera=$(realpath "${1:?usage: calibration_cli.sh path/to/tessera}")
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

model="--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 100 --micro-batch-size 2 --global-batch-size 4"
train="$model --lr 1e-3 --train-iters 2 --log-interval 1 --eval-iters 0"

out=$("$tessera" plan $model --bf16 --calibrate 2>&1)
check "plan --calibrate exits 0: $out" $?
grep -q "bf16 GEMM inputs, for the model's shapes at tp 1 and micro-batch 2" <<<"$out"
check "the calibration should say what it measured: $out" $?
python3 - <<'PY'
import json, sys
j = json.load(open("tessera_cluster.json"))
key = j["calibrated_for"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown cpu")
want = {"hidden_size": 64, "num_layers": 2, "seq_length": 32, "micro_batch_size": 2, "tensor_model_parallel_size": 1,
        "precision": "bf16", "cpu": cpu, "threads_per_rank": 1, "ranks": 1}
bad = {k: (key.get(k), v) for k, v in want.items() if key.get(k) != v}
rates = [r["flops_per_second"] for r in j["device"]["gemm_rates"] if r["m"] == 64]  # 32 tokens x 2
short = sorted({r["m"] for r in j["device"]["gemm_rates"] if r["m"] != 64})  # the same shapes on 8 and 32 rows
floor = j["device"]["kernel_seconds"]  # one small kernel's call: well under a millisecond, never free
if bad or len(rates) != 5 or min(rates) <= 0 or not 0 < floor < 1e-3 or short != [8, 32] or \
        len(j["device"]["gemm_rates"]) != 15:
    print("recorded vs expected:", bad, "rates:", rates, "short rows:", short, "kernel_seconds:", floor)
    sys.exit(1)
PY
check "tessera_cluster.json should record the model, precision and machine, five positive GEMM rates (and each at 8 and 32 rows) and the kernel floor" $?

# The same run uses the calibration; its plan line names the run's layout and precision.
out=$("$tessera" train $train --bf16 2>&1)
check "train --bf16 exits 0: $out" $?
grep -q " plan (tessera_cluster.json; tp1 pp1 dp1 v1 mbs2 gbs4 recompute=none bf16): elapsed time per iteration (ms): predicted" <<<"$out"
ok=$?; check "the matching run should plan with the calibration and the run's precision: $(grep ' plan' <<<"$out")" $ok

# Another precision, another model, another thread count: the calibration is ignored, saying why.
out=$("$tessera" train $train 2>&1)
grep -q 'ignoring tessera_cluster.json, calibrated for another run (precision: "bf16" (calibrated) vs "fp32" (this run))' <<<"$out"
ok=$?; check "fp32 run should ignore the bf16 calibration: $(grep ' plan' <<<"$out")" $ok
grep -q "tp1 pp1 dp1 v1 mbs2 gbs4 recompute=none fp32)" <<<"$out"
ok=$?; check "the fp32 run's plan line should say fp32: $(grep ' plan' <<<"$out")" $ok
out=$("$tessera" train $train --bf16 --hidden-size 128 2>&1)
grep -q 'hidden_size: 64 (calibrated) vs 128 (this run)' <<<"$out"
ok=$?; check "another model should be named as the difference: $(grep ' plan' <<<"$out")" $ok
out=$(OMP_NUM_THREADS=2 "$tessera" train $train --bf16 2>&1)
grep -q 'threads_per_rank: 1 (calibrated) vs 2 (this run)' <<<"$out"
ok=$?; check "another thread count should be named: $(grep ' plan' <<<"$out")" $ok

# The optimizer and layout of the run reach the plan line (2 ranks, distributed optimizer).
if command -v mpirun >/dev/null; then
  out=$(OMPI_MCA_mpi_yield_when_idle=1 mpirun --oversubscribe --allow-run-as-root -np 2 "$tessera" train $train \
        --use-distributed-optimizer 2>&1)
  grep -q "tp1 pp1 dp2 v1 mbs2 gbs4 recompute=none distopt fp32)" <<<"$out"
  ok=$?; check "dp2 with the distributed optimizer should be planned as such: $(grep ' plan' <<<"$out")" $ok
fi

# A file without "calibrated_for" (older, or hand-written) is not trusted either.
python3 -c 'import json; j = json.load(open("tessera_cluster.json")); del j["calibrated_for"]; json.dump(j, open("tessera_cluster.json", "w"))'
out=$("$tessera" train $train --bf16 2>&1)
grep -q "ignoring tessera_cluster.json, which does not say what it calibrated" <<<"$out"
ok=$?; check "a calibration without its key should be ignored: $(grep ' plan' <<<"$out")" $ok

finish calibration_cli
