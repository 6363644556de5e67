#!/usr/bin/env bash
# bench/torch_gpt.py, the PyTorch peer of the throughput benchmarks, on the CPU with Debian's torch: a
# tiny GPT trains (the first loss is the uniform distribution's over the padded vocabulary, as a freshly
# initialised GPT's is, and it falls), the machine-readable lines bench/throughput.py and
# scripts/gpu_step2_check.sh read are there, the FLOP count is Megatron's (GPT-2 124M at 8 x 1024 is
# 7.0e12, bench_gpu_train's number), and what this torch lacks (SDPA, torch.compile, a GPU) is refused by
# name. Skipped where Debian's python3-torch is missing.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tests/lib/checks.sh"
require_torch
script=$root/bench/torch_gpt.py
tiny=(--threads 1 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 99
      --micro-batch-size 2 --iters 4 --warmup 1)

out=$(OMP_NUM_THREADS=1 "$python" "$script" "${tiny[@]}" 2>&1); ok=$?
check "torch_gpt.py trains a tiny GPT on the CPU (exit $ok): $out" $ok
losses=$(grep -oE 'lm loss: [0-9.E+-]+' <<<"$out" | awk '{print $3}')
[ "$(wc -l <<<"$losses")" = 4 ]; ok=$?
check "four iterations logged: $out" $ok
# Vocabulary 99 + EOD = 100, padded to 128: an untrained GPT's loss is near ln 128 = 4.852.
awk 'NR == 1 {d = $1 - log(128); exit !(d < 0.05 && d > -0.05)}' <<<"$losses"; ok=$?
check "the first loss is ln 128 within 0.05: $losses" $ok
awk 'NR == 1 {first = $1} END {exit !($1 < first)}' <<<"$losses"; ok=$?
check "the loss falls: $losses" $ok
grep -qE '^TORCH_MS_PER_ITER=[0-9.]+ iters=3 threads=1 blas=\S+ corename=\S+$' <<<"$out"; ok=$?
check "bench/throughput.py's line: $(tail -2 <<<"$out")" $ok
line=$(grep '^TORCH_GPT ' <<<"$out")
grep -qE '^TORCH_GPT device=cpu dtype=fp32 attention=(explicit|sdpa) compiled=0 mbs=2 ms=[0-9.]+ tokens_per_s=[0-9]+ tflops=[0-9.]+ mfu=- peak_mem_mib=[0-9]+$' <<<"$line"; ok=$?
check "the device check's line (no MFU without --peak-tflops on the CPU): $line" $ok
expected_attention=$("$python" -c 'import torch.nn.functional as F; print("sdpa" if hasattr(F, "scaled_dot_product_attention") else "explicit")')
grep -q "attention=$expected_attention " <<<"$line"; ok=$?
check "auto attention is $expected_attention with this torch: $line" $ok
# tokens/s and ms agree: 2 x 32 tokens per iteration.
awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}} END {r = 64 / (v["ms"] / 1e3) / v["tokens_per_s"]; exit !(r > 0.99 && r < 1.01)}' <<<"$line"; ok=$?
check "tokens/s is 64 tokens over the median step: $line" $ok
out=$(OMP_NUM_THREADS=1 "$python" "$script" "${tiny[@]}" --peak-tflops 0.001 2>&1)
grep -qE '^TORCH_GPT .* mfu=[0-9]+\.[0-9]{2} ' <<<"$out"; ok=$?
check "--peak-tflops gives an MFU: $(tail -1 <<<"$out")" $ok

# Megatron's FLOPs: GPT-2 124M (the defaults), micro-batch 8 x 1024.
out=$("$python" "$script" --flops-only --micro-batch-size 8 2>&1)
[ "$out" = "MODEL_FLOPS_PER_ITER=7.001334e+12" ]; ok=$?
check "GPT-2 124M at 8 x 1024 is 7.0e12 FLOPs an iteration: $out" $ok

expect_failure "--threads is needed with --device cpu" "$python" "$script" --num-layers 1
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  expect_failure "sees no CUDA device" "$python" "$script" --device cuda
fi
if ! "$python" -c 'import torch, sys; sys.exit(0 if hasattr(torch, "compile") else 1)'; then
  expect_failure "--compile: torch" "$python" "$script" "${tiny[@]}" --compile
  expect_failure "no F.scaled_dot_product_attention" "$python" "$script" "${tiny[@]}" --attention sdpa
fi
finish torch_gpt_cli
