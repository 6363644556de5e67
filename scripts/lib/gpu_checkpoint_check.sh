# The checkpoint part of the issue-56 device check, and `metric` and `worst_of` which the whole check
# reads and compares results with (sourced by scripts/gpu_layouts_check.sh, whose run, row, $mpirun, $tessera, $small_gpt and $out the
# checks use; not run by itself): checkpoints saved from a
# GPU layout load at another layout on the CPU, and the reverse, with the losses a CPU-only save and
# resume gives. Five runs, each a few seconds on the device:
#   tp2+sp on the GPU (2 ranks sharing it), saved at iteration 10 -> resumed on the CPU at tp 1
#   tp2+sp on the CPU, saved at iteration 10                      -> resumed on the CPU at tp 1 (reference)
#                                                                 -> resumed on the GPU at pp 2 (2 ranks)
# The resumed runs train to iteration 12; their lm_loss and grad_norm of iterations 11 and 12 (from
# metrics.jsonl, at full precision: the log line prints the norm to 3 digits) must agree with the
# reference within fp32's 1e-4 (relative).

checkpoint_plan=(
  "ckpt tp2 gpu -> tp1 cpu|save --tensor-model-parallel-size 2 --sequence-parallel on the GPU, resume at tp 1 on the CPU"
  "ckpt tp2 cpu -> pp2 gpu|save --tensor-model-parallel-size 2 --sequence-parallel on the CPU, resume at --pipeline-model-parallel-size 2 on the GPU"
)

# worst_of N A B: the largest relative difference of two columns of numbers, "missing" unless both have N.
worst_of() {
  paste <(printf '%s\n' "$2") <(printf '%s\n' "$3") |
    awk -v want="$1" 'BEGIN {w = 0} NF == 2 {n++; d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2; if (s > 0) d /= s; if (d > w) w = d} END {print (n == want ? w : "missing")}'
}

# metric DIR KEY: the values of KEY in DIR/metrics.jsonl, one a line.
metric() { grep -oE "\"$2\":[0-9.eE+-]+" "$1/metrics.jsonl" 2>/dev/null | cut -d: -f2; }

# compare_resume NAME: one summary row for the resumed run NAME (its metrics in $saves/NAME) against the
# reference resume's.
compare_resume() {
  local loss norm verdict
  loss=$(worst_of 2 "$(metric "$saves/$1" lm_loss)" "$(metric "$saves/reference" lm_loss)")
  norm=$(worst_of 2 "$(metric "$saves/$1" grad_norm)" "$(metric "$saves/reference" grad_norm)")
  verdict=$(awk -v a="$loss" -v b="$norm" 'BEGIN {print (a != "missing" && b != "missing" && a <= 1e-4 && b <= 1e-4) ? "OK" : "FAILED"}')
  row "$1" "$verdict" "iterations 11-12 after resuming: loss $loss, grad norm $norm (largest relative difference, <= 1e-4)"
}

checkpoint_checks() {
  saves=$out/checkpoints
  local tp2=(--tensor-model-parallel-size 2 --sequence-parallel)
  rm -rf "$saves" && mkdir -p "$saves"
  run "ckpt save tp2 gpu" 100 env TESSERA_UNVERIFIED_GPU_LAYOUTS=1 "$mpirun" --oversubscribe -np 2 "$tessera" \
    "${small_gpt[@]}" "${tp2[@]}" --device cuda --device-collectives staged --save "$saves/gpu-tp2" --save-interval 10 &&
    run "ckpt save tp2 cpu" 100 "$mpirun" --oversubscribe -np 2 "$tessera" "${small_gpt[@]}" "${tp2[@]}" --device cpu \
      --save "$saves/cpu-tp2" --save-interval 10 &&
    run "ckpt resume cpu tp1 (reference)" 100 "$tessera" "${small_gpt[@]}" --train-iters 12 --device cpu --load "$saves/cpu-tp2" \
      --log-dir "$saves/reference" ||
    { row "checkpoints" FAILED "a save or the reference resume failed (logs: ckpt *.txt)"; return; }
  if run "ckpt tp2 gpu -> tp1 cpu" 100 "$tessera" "${small_gpt[@]}" --train-iters 12 --device cpu --load "$saves/gpu-tp2" \
    --log-dir "$saves/ckpt tp2 gpu -> tp1 cpu"; then
    compare_resume "ckpt tp2 gpu -> tp1 cpu"
  else
    row "ckpt tp2 gpu -> tp1 cpu" FAILED "rc $? (log: ckpt tp2 gpu -> tp1 cpu.txt)"
  fi
  if run "ckpt tp2 cpu -> pp2 gpu" 100 env TESSERA_UNVERIFIED_GPU_LAYOUTS=1 "$mpirun" --oversubscribe -np 2 "$tessera" \
    "${small_gpt[@]}" --train-iters 12 --pipeline-model-parallel-size 2 --device cuda --device-collectives staged \
    --load "$saves/cpu-tp2" --log-dir "$saves/ckpt tp2 cpu -> pp2 gpu"; then
    compare_resume "ckpt tp2 cpu -> pp2 gpu"
  else
    row "ckpt tp2 cpu -> pp2 gpu" FAILED "rc $? (log: ckpt tp2 cpu -> pp2 gpu.txt)"
  fi
}
