#!/usr/bin/env bash
# GPU step 2's device run (issue 50, items 5 and 6), one command within 8 minutes on an H100 or H200:
#   1. every CUDA test of the bundle (each GPU kernel against the CPU's; the models, the trainer) and
#      `tessera train --device cuda` against `--device cpu`: step 1's check, now with the host accessors;
#      then (issues 53/50) a DeepSeek-style toy GPT, multi-latent attention with YaRN and one multi-token
#      prediction module, 10 iterations on each: losses and grad norms against the CPU's; and (issues
#      50/56) a toy BERT (`tessera pretrain_bert`, binary head, padding), its lm and sop losses likewise;
#   2. bench_gpu_train, GPT-2 124M bf16 at 1024 tokens, micro-batch 8 and 16, dropout 0 and 0.1, the tiled
#      attention, the batched-GEMM one (TESSERA_CUDA_ATTENTION=gemm_bf16) and cuDNN's fused one (cudnn,
#      dropout 0);
#   3. bench/torch_gpt.py on the same card and shapes: eager with F.scaled_dot_product_attention, then
#      torch.compile (micro-batch 16, the issue's target);
#   4. ONE table of tokens/s, MFU, peak memory and Tessera's ratios to PyTorch (scripts/gpu_step2_report.py);
#   5. the top kernels of a Tessera step by GPU time (nsys where installed, else ncu), and the share outside
#      GEMMs and attention.
# Each part has a time budget (scripts/lib/device_check.sh's phase), each step a `timeout`. It finds by
# itself the PyTorch (a python3 that imports torch: the PATH's, /opt/torch/.venv's, Debian's), cuDNN and
# NCCL (wherever the image keeps them: the toolkit, a Python environment's nvidia/*/lib) of the machine.
# Everything goes to $OUT (build/gpu-step2-check without it): each step's output, log.txt, table.txt,
# kernels.txt; the summary comes last (the end of the output is what comes back from the device machine).
#   bash scripts/gpu_step2_check.sh [--dry-run] [BUNDLE (build/cuda-bundle, or build/cuda-bundle.tar.gz)]
# From a development machine: scripts/build_cuda_bundle.sh, then the device tool's
#   run(command="bash scripts/gpu_step2_check.sh", carry=["build/cuda-bundle.tar.gz"], timeout_s=540).
# --dry-run (and any run without a GPU) checks that the bundle's programs, PyTorch and the profiler are
# found, prints the plan with each step's time limit and stops; exits 1 when something it needs is
# missing. Exits 1 when a test fails or a step times out.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib/device_check.sh"
dry_run=0
if [ "${1:-}" = --dry-run ]; then dry_run=1; shift; fi
out=${OUT:-$root/build/gpu-step2-check}
mkdir -p "$out"
use_bundle "${1:-$root/build/cuda-bundle}"
exec > >(tee "$out/log.txt") 2>&1
start=$SECONDS

# The budgets (seconds) of the parts: 480 in all. MLA+MTP's and BERT's two runs of seconds each take theirs
# from the benchmark's (eight runs of about 10 s under 45 s limits).
tests_budget=130 mla_budget=20 bert_budget=20 bench_budget=110 torch_budget=140 profile_budget=60
bench_shape=(--preset gpt2-124M --bf16 --seq 1024 --warmup 2 --iters 6)
torch_shape=(--device cuda --bf16 --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024
             --iters 14 --warmup 4)

# --- what the machine has
find_device_libraries
torch_python=""
for candidate in ${TORCH_PYTHON:-} "$(command -v python3)" /opt/torch/.venv/bin/python3 /usr/bin/python3; do
  [ -x "$candidate" ] && "$candidate" -c 'import torch' >/dev/null 2>&1 && { torch_python=$candidate; break; }
done
torch_info="none"
has_compile=0
if [ -n "$torch_python" ]; then
  torch_info=$("$torch_python" -c 'import torch, torch.nn.functional as F
sdpa, compile = hasattr(F, "scaled_dot_product_attention"), hasattr(torch, "compile")
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), GPU: {torch.cuda.is_available()}, "
      f"SDPA: {sdpa}, torch.compile: {compile}")' 2>&1)
  "$torch_python" -c 'import sys, torch; sys.exit(0 if hasattr(torch, "compile") else 1)' 2>/dev/null && has_compile=1
fi
profiler=""
for tool in nsys ncu; do
  p=$(command -v "$tool" || ls /usr/local/cuda/bin/$tool /opt/nvidia/nsight-*/*/bin/$tool /opt/nvidia/nsight-*/bin/$tool 2>/dev/null | head -1)
  [ -n "$p" ] && { profiler=$p; break; }
done
report_python=$(command -v python3 || echo "$torch_python")  # the reports need only the standard library

echo "=== gpu_step2_check: what this machine has"
echo "bundle:   $bundle ($(ls "$bundle"/bin/*_test 2>/dev/null | wc -l) test programs)"
echo "PyTorch:  ${torch_python:-none} ($torch_info)"
echo "cuBLASLt: ${cublaslt_dirs:-not found}"
echo "cuDNN:    ${cudnn_dirs:-not found}"
echo "NVRTC:    ${nvrtc_dirs:-not found} (cuDNN's runtime-compiled engines)"
echo "NCCL:     ${nccl_dirs:-not found}"
echo "profiler: ${profiler:-none (neither nsys nor ncu)}"
missing=()
for bin in bench_gpu_train tessera; do [ -x "$bundle/bin/$bin" ] || missing+=("$bundle/bin/$bin"); done
ls "$bundle"/bin/*_test >/dev/null 2>&1 || missing+=("$bundle/bin/*_test")
[ -n "$torch_python" ] || missing+=("a python3 that imports torch")
[ -f "$root/bench/torch_gpt.py" ] || missing+=("$root/bench/torch_gpt.py")

# --- the plan: (name, seconds, command) of the measured steps
bench_runs=()
for mbs in 8 16; do for dropout in 0 0.1; do bench_runs+=("$mbs $dropout tiled"); done; done
# The opt-in attentions (TESSERA_CUDA_ATTENTION, until this check has run them) beside the tiled one: the
# batched-GEMM one with bf16 products (with dropout too), and cuDNN's fused attention, which refuses
# dropout. They took the two runs of gemm (fp32 products), the slower GEMM variant.
bench_runs+=("16 0 gemm_bf16" "8 0.1 gemm_bf16" "16 0 cudnn" "8 0 cudnn")
torch_runs=("eager 8" "eager 16")
[ $has_compile = 1 ] && torch_runs+=("compiled 16")
echo "=== gpu_step2_check: the plan (each limit also capped by its part's budget)"
echo "1. tests (${tests_budget} s): $(ls "$bundle"/bin/*_test 2>/dev/null | xargs -n1 basename 2>/dev/null | paste -sd' ' -), 60 s each; tessera train --device cuda / cpu, 120 s each"
echo "1b. MLA+MTP (${mla_budget} s): tessera train ${mla_mtp_gpt[*]:1} --device cuda / cpu"
echo "1c. BERT (${bert_budget} s): tessera ${toy_bert[*]} --device cuda / cpu"
echo "2. bench_gpu_train (${bench_budget} s): ${bench_shape[*]} with --mbs/--dropout/TESSERA_CUDA_ATTENTION: $(printf '(%s) ' "${bench_runs[@]}"), 45 s each"
echo "3. torch_gpt.py (${torch_budget} s): ${torch_shape[*]}: $(printf '(%s) ' "${torch_runs[@]}")$([ $has_compile = 1 ] || echo '(no torch.compile: left out)'), 45 s eager, 150 s compiled"
echo "4. the table (scripts/gpu_step2_report.py table)"
echo "5. profile (${profile_budget} s): ${profiler:-none} over bench_gpu_train --mbs 8 --dropout 0, top kernels (scripts/gpu_step2_report.py kernels)"
echo "budget: $((tests_budget + mla_budget + bert_budget + bench_budget + torch_budget + profile_budget)) s"
if [ ${#missing[@]} -gt 0 ]; then
  printf 'gpu_step2_check: missing: %s\n' "${missing[@]}"
  echo "gpu_step2_check: FAILED (cannot run)"
  exit 1
fi
if [ $dry_run = 1 ] || ! have_gpu; then
  [ $dry_run = 1 ] || echo "no GPU here ($(command -v nvidia-smi >/dev/null && nvidia-smi -L 2>&1 | head -1 || echo 'no nvidia-smi: no NVIDIA driver')): nothing measured"
  echo "gpu_step2_check: plan OK"
  exit 0
fi

# --- 1. step 1's check, without memcheck
tessera_env=(LD_LIBRARY_PATH="$tessera_library_path")
step nvidia-smi 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
phase $tests_budget
run_bundle_tests 60 "${tessera_env[@]}"
train_on_gpu_and_cpu "${tessera_env[@]}"
phase $mla_budget
train_mla_mtp_on_gpu_and_cpu "${tessera_env[@]}"
phase $bert_budget
train_bert_on_gpu_and_cpu "${tessera_env[@]}"

# --- 2. Tessera's step
phase $bench_budget
for run in "${bench_runs[@]}"; do
  read -r mbs dropout attention <<<"$run"
  step "bench_gpu_train mbs $mbs dropout $dropout $attention" 45 env "${tessera_env[@]}" \
    TESSERA_CUDA_ATTENTION="$attention" "$bundle/bin/bench_gpu_train" "${bench_shape[@]}" --mbs "$mbs" --dropout "$dropout"
done

# --- 3. PyTorch's, with the machine's own libraries
phase $torch_budget
for run in "${torch_runs[@]}"; do
  read -r mode mbs <<<"$run"
  limit=45 flags=()
  [ "$mode" = compiled ] && limit=150 flags=(--compile)
  step "torch_gpt $mode mbs $mbs" $limit "$torch_python" "$root/bench/torch_gpt.py" "${torch_shape[@]}" \
    --micro-batch-size "$mbs" "${flags[@]}"
done
phase 0

# --- 4. the table
echo "=== the table"
"$report_python" "$root/scripts/gpu_step2_report.py" table "$out"/bench_gpu_train*.txt "$out"/torch_gpt*.txt \
  > "$out/table.txt" 2>&1 || failed=1
cat "$out/table.txt"

# --- 5. where Tessera's step spends its GPU time
phase $profile_budget
profile=(env "${tessera_env[@]}" "$bundle/bin/bench_gpu_train" "${bench_shape[@]}" --mbs 8 --dropout 0)
case $(basename "${profiler:-none}") in
  nsys)
    step "nsys profile" 45 "$profiler" profile --trace=cuda --force-overwrite=true -o "$out/profile" "${profile[@]}" \
      --warmup 1 --iters 2
    step "nsys stats" 25 "$profiler" stats --report cuda_gpu_kern_sum --format csv --output "$out/kernels" "$out/profile.nsys-rep"
    kernels_csv=$(ls "$out"/kernels*.csv 2>/dev/null | head -1) ;;
  ncu)
    step "ncu" 70 "$profiler" --metrics gpu__time_duration.sum --csv --page raw --cache-control none \
      --clock-control none "${profile[@]}" --warmup 0 --iters 1  # one step: ncu serialises every launch
    kernels_csv="$out/ncu.txt" ;;
  *) kernels_csv="" ;;
esac
phase 0
echo "=== top kernels"
if [ -n "$kernels_csv" ] && [ -f "$kernels_csv" ]; then
  "$report_python" "$root/scripts/gpu_step2_report.py" kernels "$kernels_csv" > "$out/kernels.txt" 2>&1 || failed=1
else
  echo "no profile (${profiler:-no nsys or ncu on this machine})" > "$out/kernels.txt"
fi
cat "$out/kernels.txt"

echo
echo "=== gpu_step2_check summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), $((SECONDS - start)) s)"
printf '%s\n' "${summary[@]}"
cat "$out/table.txt"
tail -1 "$out/kernels.txt"
[ $failed -eq 0 ] && echo "gpu_step2_check: OK" || echo "gpu_step2_check: FAILED"
exit $failed
