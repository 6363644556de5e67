#!/usr/bin/env bash
# scripts/gpu_step2_check.sh, GPU step 2's one device command, on a machine without a GPU: its --dry-run
# finds the bundle's programs and a PyTorch and prints the plan within 8 minutes, refuses by name what is
# missing; then the whole run against stand-ins (a fake nvidia-smi, bundle programs and PyTorch that print
# what the real ones print, a fake nsys) so that every part, the table of ratios and the summary are
# exercised before device time is spent; and scripts/gpu_step2_report.py on nsys's and ncu's CSV.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tests/lib/checks.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
script=$root/scripts/gpu_step2_check.sh
report=$root/scripts/gpu_step2_report.py

stub() {  # stub PATH BODY: an executable shell script
  mkdir -p "$(dirname "$1")"
  printf '#!/bin/bash\n%s\n' "$2" > "$1"
  chmod +x "$1"
}
bundle=$work/bundle
stub "$bundle/bin/kernels_cuda_norms_test" 'echo "[  PASSED  ] 3 tests."'
stub "$bundle/bin/model_cuda_gpt_model_test" 'echo "[  PASSED  ] 6 tests."'
# tessera: --train-iters iterations of lm loss, mtp_1 loss with --mtp-num-layers, sop loss for pretrain_bert,
# and grad norm; with DRIFT_ON_GPU set, the GPU's mtp_1 loss is off by 1e-3 relative (the MLA+MTP
# comparison must fail), with SOP_DRIFT_ON_GPU its sop loss (the BERT comparison must fail).
stub "$bundle/bin/tessera" 'iters=20 mtp=0 device=cpu bert=0
[ "$1" = pretrain_bert ] && bert=1
while [ $# -gt 0 ]; do case $1 in --train-iters) iters=$2; shift ;; --mtp-num-layers) mtp=$2; shift ;; --device) device=$2; shift ;; esac; shift; done
for i in $(seq "$iters"); do
  line="iteration $i | lm loss: 4.6$i""E+00 |"
  mtp_loss=4.70$i""E+00 sop_loss=6.90$i""E-01
  [ "$device" = cuda ] && [ -n "${DRIFT_ON_GPU:-}" ] && mtp_loss=4.705$i""E+00
  [ "$device" = cuda ] && [ -n "${SOP_DRIFT_ON_GPU:-}" ] && sop_loss=6.907$i""E-01
  [ "$mtp" -gt 0 ] && line+=" mtp_1 loss: $mtp_loss |"
  [ "$bert" = 1 ] && line+=" sop loss: $sop_loss |"
  echo "$line grad norm: 1.$i""00 |"
done'
# bench_gpu_train: its machine-readable line, 20,000 tokens/s at micro-batch 8 and 30,000 at 16.
stub "$bundle/bin/bench_gpu_train" 'mbs=8 dropout=0.1
while [ $# -gt 0 ]; do case $1 in --mbs) mbs=$2; shift ;; --dropout) dropout=$2; shift ;; esac; shift; done
tps=$((mbs == 8 ? 20000 : 30000))
echo "BENCH_GPU_TRAIN preset=gpt2-124M dtype=bf16 mbs=$mbs dropout=$dropout attention=${TESSERA_CUDA_ATTENTION:-tiled} ms=$((mbs * 1024 * 1000 / tps)) tokens_per_s=$tps tflops=17 mfu=1.70 peak_mem_mib=$((mbs * 1000))"'
mkdir -p "$bundle/lib"

out=$(OUT="$work/dry" bash "$script" --dry-run "$bundle" 2>&1); ok=$?
check "--dry-run succeeds with every program present (exit $ok): $out" $ok
grep -q '^gpu_step2_check: plan OK$' <<<"$out"; ok=$?
check "--dry-run says the plan is OK: $(tail -3 <<<"$out")" $ok
grep -qE '^PyTorch: +/\S+python3 \(torch ' <<<"$out"; ok=$?
check "--dry-run finds a python3 that imports torch: $(grep PyTorch <<<"$out")" $ok
budget=$(grep -oE '^budget: [0-9]+ s' <<<"$out" | awk '{print $2}')
[ -n "$budget" ] && [ "$budget" -le 480 ]; ok=$?
check "the parts' budgets fit 8 minutes: $budget s" $ok
for part in "kernels_cuda_norms_test" "--multi-latent-attention" "--mtp-num-layers 1" "tessera pretrain_bert" "(16 0.1 tiled)" "(16 0 gemm_bf16)" "(16 0 cudnn)" "(eager 16)" "top kernels"; do
  grep -qF -- "$part" <<<"$out"; ok=$?
  check "the plan names $part: $out" $ok
done
[ -f "$work/dry/log.txt" ]; ok=$?
check "the log goes to \$OUT" $ok
mv "$bundle/bin/bench_gpu_train" "$work/bench_gpu_train"
out=$(OUT="$work/dry2" bash "$script" --dry-run "$bundle" 2>&1); ok=$?
[ $ok -eq 1 ] && grep -qF "missing: $bundle/bin/bench_gpu_train" <<<"$out"; ok=$?
check "a missing bench_gpu_train is named and fails the dry run: $(tail -3 <<<"$out")" $ok
mv "$work/bench_gpu_train" "$bundle/bin/bench_gpu_train"
out=$(OUT="$work/dry3" bash "$script" --dry-run "$work/nothing" 2>&1); ok=$?
[ $ok -eq 2 ] && grep -qF "no bundle at $work/nothing" <<<"$out"; ok=$?
check "no bundle: a clear error: $out" $ok

# The whole run, against stand-ins. PyTorch: 40,000 tokens/s eager and 50,000 compiled at micro-batch 16.
fake=$work/fakebin
stub "$fake/nvidia-smi" '[ "${1:-}" = -L ] && echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)" || echo "NVIDIA H100 80GB HBM3, 580.00, 81559 MiB, 1980 MHz"'
stub "$fake/torch-python" 'if [ "$1" = -c ]; then echo "torch 2.11.0 (CUDA 13.0), GPU: True, SDPA: True, torch.compile: True"; exit 0; fi
mbs=1 compiled=0
while [ $# -gt 0 ]; do case $1 in --micro-batch-size) mbs=$2; shift ;; --compile) compiled=1 ;; esac; shift; done
tps=$((compiled ? 50000 : 40000))
echo "TORCH_GPT device=cuda dtype=bf16 attention=sdpa compiled=$compiled mbs=$mbs ms=$((mbs * 1024 * 1000 / tps)) tokens_per_s=$tps tflops=200 mfu=20.00 peak_mem_mib=$((mbs * 2000))"'
printf '%s\n' 'Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name' \
  '60.0,600000000,24,1,1,1,1,0,"attention_forward_tiled_kernel(const float *, int)"' \
  '25.0,250000000,100,1,1,1,1,0,nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNT' \
  '15.0,150000000,50,1,1,1,1,0,norm_weight_grad_kernel' > "$work/nsys.csv"
stub "$fake/nsys" 'if [ "$1" = stats ]; then while [ $# -gt 0 ]; do [ "$1" = --output ] && cp '"$work/nsys.csv"' "$2_cuda_gpu_kern_sum.csv"; shift; done; fi; exit 0'
out=$(PATH="$fake:/usr/bin:/bin" TORCH_PYTHON="$fake/torch-python" OUT="$work/run" bash "$script" "$bundle" 2>&1); ok=$?
check "the whole run passes against the stand-ins (exit $ok): $(tail -20 <<<"$out")" $ok
summary=$(sed -n '/^=== gpu_step2_check summary/,$p' <<<"$out")
for name in kernels_cuda_norms_test model_cuda_gpt_model_test "bench_gpu_train mbs 16 dropout 0.1 tiled" "bench_gpu_train mbs 16 dropout 0 gemm_bf16" "torch_gpt compiled mbs 16" "nsys profile"; do
  grep -qE "^$name +rc=0 " <<<"$summary"; ok=$?
  check "the summary has a passing line for $name: $summary" $ok
done
grep -q "^train losses, GPU against CPU .*: OK$" <<<"$summary"; ok=$?
check "the train losses are compared: $summary" $ok
grep -qE "^MLA\+MTP train, GPU against CPU .* over 10 iterations: lm loss 0, mtp_1 loss 0, grad norm 0: OK$" <<<"$summary"; ok=$?
check "the MLA+MTP run's losses and grad norms are compared: $summary" $ok
grep -qE "^BERT train, GPU against CPU .* over 10 iterations: lm loss 0, sop loss 0, grad norm 0: OK$" <<<"$summary"; ok=$?
check "the BERT run's lm and sop losses and grad norms are compared: $summary" $ok
for name in "tessera train MLA+MTP --device cuda" "tessera train MLA+MTP --device cpu" \
            "tessera pretrain_bert --device cuda" "tessera pretrain_bert --device cpu"; do
  grep -qE "^$(sed 's/+/\\+/' <<<"$name") +rc=0 " <<<"$summary"; ok=$?
  check "the summary has a passing line for $name: $summary" $ok
done
# Tessera 30,000 tokens/s at micro-batch 16: 0.75 of eager's 40,000, 0.60 of compiled's 50,000; memory
# 16,000 MiB over eager's 32,000.
row=$(grep -E '^tessera bf16 \(tiled attention\) +16 +0 ' <<<"$summary")
[ "$(awk '{print $(NF-2), $(NF-1), $NF}' <<<"$row")" = "0.75 0.60 0.50" ]; ok=$?
check "the table's ratios for Tessera at micro-batch 16, dropout 0: '$row' in $summary" $ok
row=$(grep -E '^torch eager bf16 \(sdpa attention\) +8 ' <<<"$summary")
[ -n "$row" ]; ok=$?
check "the table has PyTorch eager at micro-batch 8: $summary" $ok
grep -qF "outside GEMMs and attention 15.0 %" <<<"$summary"; ok=$?
check "the summary ends with the share outside GEMMs and attention: $summary" $ok
[ "$(tail -1 <<<"$out")" = "gpu_step2_check: OK" ]; ok=$?
check "the last line is the verdict: $(tail -1 <<<"$out")" $ok
[ -s "$work/run/table.txt" ] && [ -s "$work/run/kernels.txt" ]; ok=$?
check "table.txt and kernels.txt are in \$OUT: $(ls "$work/run")" $ok
# The GPU's mtp_1 loss 1e-3 off the CPU's fails the run, naming the MLA+MTP comparison.
out=$(DRIFT_ON_GPU=1 PATH="$fake:/usr/bin:/bin" TORCH_PYTHON="$fake/torch-python" OUT="$work/drift" bash "$script" "$bundle" 2>&1); ok=$?
[ $ok -eq 1 ] && grep -qE '^MLA\+MTP train, GPU against CPU .*lm loss 0, mtp_1 loss 0\.00[0-9]+, grad norm 0: FAILED$' <<<"$out" &&
  grep -q "^train losses, GPU against CPU .*: OK$" <<<"$out" && [ "$(tail -1 <<<"$out")" = "gpu_step2_check: FAILED" ]; ok=$?
check "an MTP loss off on the GPU fails the run (exit $ok): $(grep -A1 '^MLA' <<<"$out")" $ok
# The GPU's sop loss 1e-3 off the CPU's fails the run, naming the BERT comparison.
out=$(SOP_DRIFT_ON_GPU=1 PATH="$fake:/usr/bin:/bin" TORCH_PYTHON="$fake/torch-python" OUT="$work/sop-drift" bash "$script" "$bundle" 2>&1); ok=$?
[ $ok -eq 1 ] && grep -qE '^BERT train, GPU against CPU .*lm loss 0, sop loss 0\.00[0-9]+, grad norm 0: FAILED$' <<<"$out" &&
  grep -q "^MLA+MTP train, GPU against CPU .*: OK$" <<<"$out" && [ "$(tail -1 <<<"$out")" = "gpu_step2_check: FAILED" ]; ok=$?
check "a sop loss off on the GPU fails the run (exit $ok): $(grep -A1 '^BERT' <<<"$out")" $ok
# A failing test program fails the run, and says which.
stub "$bundle/bin/kernels_cuda_norms_test" 'echo "[  FAILED  ] 1 test."; exit 1'
out=$(PATH="$fake:/usr/bin:/bin" TORCH_PYTHON="$fake/torch-python" OUT="$work/run2" bash "$script" "$bundle" 2>&1); ok=$?
[ $ok -eq 1 ] && grep -qE '^kernels_cuda_norms_test +rc=1 .*1 FAILED' <<<"$out" && [ "$(tail -1 <<<"$out")" = "gpu_step2_check: FAILED" ]; ok=$?
check "a failing test fails the run (exit $ok): $(tail -12 <<<"$out")" $ok

# ncu's raw CSV: one row per launch after a units row, the program's own output before it.
cat > "$work/ncu.txt" <<'EOF'
BENCH_GPU_TRAIN preset=gpt2-124M dtype=bf16 mbs=8 dropout=0 attention=tiled ms=1 tokens_per_s=1 tflops=1 mfu=1 peak_mem_mib=1
==PROF== Disconnected from process 1
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","gpu__time_duration.sum"
"","","","","","","","nsecond"
"0","1","bench_gpu_train","h","sm90_xmma_gemm_bf16bf16_bf16f32","1","7","3,000"
"1","1","bench_gpu_train","h","bias_grad_partials_kernel","1","7","500"
"2","1","bench_gpu_train","h","sm90_xmma_gemm_bf16bf16_bf16f32","1","7","1,000"
"3","1","bench_gpu_train","h","softmax_forward_kernel","1","7","500"
EOF
out=$(/usr/bin/python3 "$report" kernels "$work/ncu.txt" 2>&1); ok=$?
check "gpu_step2_report.py reads ncu's CSV (exit $ok): $out" $ok
first=$(sed -n 2p <<<"$out")
[ "$(awk '{print $1, $2, $3, $4}' <<<"$first")" = "sm90_xmma_gemm_bf16bf16_bf16f32 0.00 80.0 2" ]; ok=$?
check "the GEMM's two launches add up, first: '$first'" $ok
grep -qF "GEMMs 80.0 %, attention 10.0 %, outside GEMMs and attention 10.0 %" <<<"$out"; ok=$?
check "the shares: $out" $ok
expect_failure "no BENCH_GPU_TRAIN or TORCH_GPT lines" /usr/bin/python3 "$report" table "$work/nsys.csv"
expect_failure "no CSV heading" /usr/bin/python3 "$report" kernels "$bundle/bin/tessera"
finish device_gpu_step2_cli
