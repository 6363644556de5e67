# What the device checks share (sourced by scripts/gpu_check.sh and scripts/gpu_step2_check.sh; not run
# by itself): the bundle scripts/build_cuda_bundle.sh built, the libraries the GPU machine keeps in places
# of its own, timed steps that record a summary line each, and `tessera train` on the GPU against the CPU
# (a dense GPT; a DeepSeek-style one with multi-latent attention, YaRN and multi-token prediction; a BERT).
# The caller sets $out (where each step's output goes) before calling step.

summary=()
failed=0

# use_bundle PATH: sets $bundle to PATH, unpacking PATH.tar.gz beside it when only that is there (what the
# device tool carries); exits 2 when neither holds a bundle.
use_bundle() {
  bundle=$1
  if [ ! -d "$bundle" ] && [ -f "${bundle%.tar.gz}.tar.gz" ]; then
    local packed=${bundle%.tar.gz}.tar.gz
    bundle=${packed%.tar.gz}
    mkdir -p "$bundle" && tar -C "$bundle" -xzf "$packed" || { echo "$(basename "$0"): cannot unpack $packed" >&2; exit 2; }
  fi
  [ -d "$bundle/bin" ] || { echo "$(basename "$0"): no bundle at $bundle (scripts/build_cuda_bundle.sh builds it)" >&2; exit 2; }
}

# library_dirs PATTERN: the folders (colon-separated) holding a library named PATTERN wherever the device
# image keeps it: the toolkit, /usr/lib, or a Python environment's NVIDIA wheels (site-packages/nvidia/*/lib).
library_dirs() {
  timeout 60 find /usr/local /opt /usr/lib /usr/lib64 -xdev -name "$1" -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -
}

# find_device_libraries: $cublaslt_dirs, $cudnn_dirs, $nccl_dirs and $nvrtc_dirs (empty where none is
# found), and $tessera_library_path, the search path Tessera's binaries run with: the bundle's libraries
# first, then the device's cuBLASLt, cuDNN, NCCL and NVRTC (cuDNN's runtime-compiled engines, the fused
# attention's among them, load the libnvrtc of the CUDA it was built for: a wheel's cuDNN its wheel's).
# Only Tessera's steps get it: the bundle's libstdc++ and libgomp are not PyTorch's.
find_device_libraries() {
  cublaslt_dirs=$(library_dirs 'libcublasLt.so.1[0-9]*')
  cudnn_dirs=$(library_dirs 'libcudnn.so.[0-9]*')
  nccl_dirs=$(library_dirs 'libnccl.so.[0-9]*')
  nvrtc_dirs=$(library_dirs 'libnvrtc.so.1[0-9]*')
  local dirs
  dirs=$(printf '%s\n' "$cublaslt_dirs" "$cudnn_dirs" "$nccl_dirs" "$nvrtc_dirs" | tr ':' '\n' | grep . | awk '!seen[$0]++' | paste -sd: -)
  tessera_library_path="$bundle/lib${dirs:+:$dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# have_gpu: an NVIDIA driver that sees a GPU.
have_gpu() { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

# phase SECONDS: the steps from here on share SECONDS (each gets at most what is left of it), so that a
# slow step shortens the phase rather than the whole check; phase 0 lifts it.
phase_end=0
phase() { phase_end=$(($1 > 0 ? SECONDS + $1 : 0)); }

# step NAME SECONDS COMMAND...: runs COMMAND under a time limit (and the phase's), its output in
# "$out/NAME.txt" and shown, and records its status, time and GoogleTest counts in the summary. A step
# the phase has no time left for is recorded as not run, a failure.
step() {
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  if [ "$phase_end" -gt 0 ] && [ $((phase_end - SECONDS)) -lt "$limit" ]; then limit=$((phase_end - SECONDS)); fi
  if [ "$limit" -lt 1 ]; then
    failed=1
    summary+=("$(printf '%-40s not run: its phase had no time left' "$name")")
    return
  fi
  echo "=== $name"
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  cat "$out/$name.txt"
  local counts
  counts=$(grep -hoE '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$out/$name.txt" | sed -E 's/\[ *([A-Z]+) *\] ([0-9]+).*/\2 \1/' | paste -sd' ' -)
  [ $rc -eq 0 ] || failed=1
  [ $rc -eq 124 ] && counts="timed out after ${limit}s"
  summary+=("$(printf '%-40s rc=%-3s %4ss  %s' "$name" "$rc" $((SECONDS - start)) "${counts:-}")")
}

# run_bundle_tests SECONDS [ENV...]: every test program of the bundle, each under the limit, its gtest XML
# in $out. ENV (VAR=value words) goes before each, through env.
run_bundle_tests() {
  local limit=$1 test name
  shift
  for test in "$bundle"/bin/*_test; do
    name=$(basename "$test")
    step "$name" "$limit" env "$@" "$test" --gtest_output="xml:$out/$name.xml"
  done
}

# train_on_gpu_and_cpu [ENV...]: `tessera train`, 20 iterations of a small GPT on the GPU and on the CPU
# from the same seed, and a summary line: every logged loss within 1e-4 relative (else the check fails).
# tessera runs as an isolated MPI singleton (no mpirun, no daemon) with the bundle's Open MPI plugins.
train_on_gpu_and_cpu() {
  local small_gpt=(train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --mock-data
                   --tokenizer-type NullTokenizer --vocab-size 100 --micro-batch-size 4 --global-batch-size 8
                   --lr 1e-3 --train-iters 20 --log-interval 1 --eval-iters 0 --seed 1234)
  local mpi=(OMPI_MCA_mca_base_component_path="$bundle/lib/openmpi" OMPI_MCA_ess_singleton_isolated=1)
  pushd "$out" >/dev/null || return
  step "tessera train --device cuda" 120 env "$@" "${mpi[@]}" "$bundle/bin/tessera" "${small_gpt[@]}" --device cuda
  step "tessera train --device cpu" 120 env "$@" "${mpi[@]}" "$bundle/bin/tessera" "${small_gpt[@]}" --device cpu
  popd >/dev/null || return
  losses() { grep -oE 'lm loss: [0-9.E+-]+' "$out/tessera train --device $1.txt" | awk '{print $3}'; }
  local worst verdict
  worst=$(paste <(losses cuda) <(losses cpu) | awk 'BEGIN {w = -1} NF == 2 {n++; d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d} END {print (n == 20 ? w : "missing")}')
  verdict=$(awk -v w="$worst" 'BEGIN {print (w != "missing" && w <= 1e-4) ? "OK" : "FAILED"}')
  [ "$verdict" = OK ] || failed=1
  summary+=("$(printf '%-40s %s' "train losses, GPU against CPU" "largest relative difference $worst over 20 iterations: $verdict")")
}

# The DeepSeek-style toy GPT of train_mla_mtp_on_gpu_and_cpu: multi-latent attention with a query latent,
# latent norms and YaRN's RoPE (scaled 4x past an original context of 32 positions, so that the ramp and
# mscale act), and one multi-token prediction module; 10 iterations of seconds on either device.
mla_mtp_iterations=10
mla_mtp_gpt=(train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --mock-data
             --tokenizer-type NullTokenizer --vocab-size 100 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
             --train-iters $mla_mtp_iterations --log-interval 1 --eval-iters 0 --seed 1234
             --normalization RMSNorm --swiglu --position-embedding-type rope --qk-layernorm
             --multi-latent-attention --q-lora-rank 32 --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8
             --v-head-dim 12 --rope-type yarn --rotary-scaling-factor 4 --mscale 1 --mscale-all-dim 1
             --yarn-original-max-position-embeddings 32 --yarn-beta-fast 32 --yarn-beta-slow 1
             --mtp-num-layers 1 --mtp-loss-scaling-factor 0.3)

# worst_train_difference GPU_LOG CPU_LOG FIELD ITERATIONS [ROUNDING]: the largest relative difference of
# FIELD ("lm loss", "mtp_1 loss", "grad norm") between the two logs over the logged iterations, each
# difference first less ROUNDING (what printing the value may change it by: grad norm has 3 decimals);
# "missing" unless both logs have ITERATIONS values.
worst_train_difference() {
  local gpu=$1 cpu=$2 field=$3 iterations=$4 rounding=${5:-0}
  values() { grep -oE "$field: [0-9.E+-]+" "$1" | awk '{print $NF}'; }
  paste <(values "$gpu") <(values "$cpu") | awk -v want="$iterations" -v r="$rounding" 'BEGIN {w = -1}
    NF == 2 {n++; d = $1 - $2; if (d < 0) d = -d; d = d > r ? d - r : 0; c = $2 < 0 ? -$2 : $2
             d = d / (c > 0 ? c : 1); if (d > w) w = d}
    END {print (n == want ? w : "missing")}'
}

# The toy BERT of train_bert_on_gpu_and_cpu (issues 50/56): `tessera pretrain_bert` on mock data (padded
# samples, masked words, swapped segments), the binary head with its token types, bidirectional attention
# over the padding mask, dropout on; 10 iterations of seconds on either device.
bert_iterations=10
toy_bert=(pretrain_bert --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
          --max-position-embeddings 64 --mock-data --tokenizer-type NullTokenizer --vocab-size 100
          --micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --train-iters $bert_iterations --log-interval 1
          --eval-iters 0 --seed 1234)

# train_toy_on_gpu_and_cpu LABEL NAME ITERATIONS SECOND_LOSS FLAGS_ARRAY [ENV...]: tessera with the flags of
# the array named FLAGS_ARRAY on the GPU and on the CPU from the same seed, and a summary line LABEL: every
# logged lm loss and SECOND_LOSS within 1e-4 relative, grad norm (less its printing's rounding) within
# 1e-3, else the check fails. The steps take at most what the caller's phase leaves.
train_toy_on_gpu_and_cpu() {
  local label=$1 name=$2 iterations=$3 second=$4
  local -n toy_flags=$5
  shift 5
  local mpi=(OMPI_MCA_mca_base_component_path="$bundle/lib/openmpi" OMPI_MCA_ess_singleton_isolated=1)
  pushd "$out" >/dev/null || return
  step "$name cuda" 30 env "$@" "${mpi[@]}" "$bundle/bin/tessera" "${toy_flags[@]}" --device cuda
  step "$name cpu" 30 env "$@" "${mpi[@]}" "$bundle/bin/tessera" "${toy_flags[@]}" --device cpu
  popd >/dev/null || return
  local gpu="$out/$name cuda.txt" cpu="$out/$name cpu.txt" lm other grad verdict
  lm=$(worst_train_difference "$gpu" "$cpu" "lm loss" "$iterations")
  other=$(worst_train_difference "$gpu" "$cpu" "$second" "$iterations")
  grad=$(worst_train_difference "$gpu" "$cpu" "grad norm" "$iterations" 0.001)
  verdict=$(awk -v l="$lm" -v m="$other" -v g="$grad" 'BEGIN {
    print (l != "missing" && m != "missing" && g != "missing" && l <= 1e-4 && m <= 1e-4 && g <= 1e-3) ? "OK" : "FAILED"}')
  [ "$verdict" = OK ] || failed=1
  summary+=("$(printf '%-40s %s' "$label" "largest relative difference over $iterations iterations: lm loss $lm, $second $other, grad norm $grad: $verdict")")
}

# The DeepSeek-style toy GPT (lm and mtp_1 losses) and the toy BERT (lm and sop losses) above.
train_mla_mtp_on_gpu_and_cpu() {
  train_toy_on_gpu_and_cpu "MLA+MTP train, GPU against CPU" "tessera train MLA+MTP --device" \
    "$mla_mtp_iterations" "mtp_1 loss" mla_mtp_gpt "$@"
}
train_bert_on_gpu_and_cpu() {
  train_toy_on_gpu_and_cpu "BERT train, GPU against CPU" "tessera pretrain_bert --device" \
    "$bert_iterations" "sop loss" toy_bert "$@"
}
