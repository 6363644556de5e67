#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (-fsanitize=fuzzer,address,undefined) and runs each
# for SECONDS seconds (default 60) from a small seed corpus, printing libFuzzer's execution count.
# A crash leaves its input in build/fuzz/ and makes the script fail.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build/fuzz
mkdir -p "$out"
cxx=${CLANGXX:-clang++}
command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (scripts/setup.sh installs clang)" >&2; exit 1; }
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I"$root/src")
common=("$root/src/core/tensor.cc" "$root/src/core/file_io.cc" "$root/src/ckpt/crc32c.cc")

build() {  # name sources...
  local name=$1; shift
  echo "fuzz.sh: building $name"
  "$cxx" "${flags[@]}" "$@" "${common[@]}" -o "$out/$name"
}
build safetensors_fuzzer "$root/fuzz/safetensors_fuzzer.cc" "$root/src/ckpt/safetensors.cc"
build checkpoint_index_fuzzer "$root/fuzz/checkpoint_index_fuzzer.cc" "$root/src/ckpt/checkpoint_index.cc" \
  "$root/src/ckpt/reshard.cc"

# Seeds: a valid file and a valid index, which the fuzzer mutates.
mkdir -p "$out/corpus_safetensors" "$out/corpus_index"
python3 - "$out" <<'PY'
import json, struct, sys
out = sys.argv[1]
header = {"__metadata__": {"format": "pt"},
          "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
          "b": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}}
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(f"{out}/corpus_safetensors/seed", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + bytes(range(24)))
crc = "crc32c:0123abcd"
index = {"format": "tessera-checkpoint", "version": 2, "iteration": 10, "consumed_train_samples": 80,
         "skipped_iterations": 0, "seed": 1234, "optimizer_steps": 10, "has_optimizer": True, "args": {},
         "files": {"model.tp00.pp00.safetensors": {"bytes": 100, "crc32c": crc},
                   "model.tp01.pp00.safetensors": {"bytes": 100, "crc32c": crc}},
         "tensors": {"w": {"global_shape": [8, 6], "slices": [
             {"file": "model.tp00.pp00.safetensors", "key": "w", "shape": [2, 4, 3], "dtype": "fp32",
              "view": [2, 4, 6], "dim": 1, "offset": 0, "length": 4, "crc32c": crc}]},
             "b": {"global_shape": [8], "slices": [
             {"file": "model.tp00.pp00.safetensors", "key": "b", "shape": [4], "dtype": "fp32",
              "view": [8], "dim": 0, "offset": 0, "length": 4, "crc32c": crc},
             {"file": "model.tp01.pp00.safetensors", "key": "b", "shape": [4], "dtype": "fp32",
              "view": [8], "dim": 0, "offset": 4, "length": 4, "crc32c": crc}]},
             "n": {"global_shape": [6], "slices": [
             {"file": "model.tp00.pp00.safetensors", "key": "n", "shape": [6], "dtype": "fp32",
              "view": [6], "dim": -1, "offset": 0, "length": 0, "crc32c": crc}]}}}
with open(f"{out}/corpus_index/seed", "w") as f:
    json.dump(index, f)
PY

status=0
for target in safetensors_fuzzer:corpus_safetensors checkpoint_index_fuzzer:corpus_index; do
  name=${target%%:*}; corpus=$out/${target#*:}
  echo "fuzz.sh: running $name for ${seconds}s"
  log=$out/$name.log
  if (cd "$out" && ./"$name" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "$corpus" >"$log" 2>&1); then
    echo "fuzz.sh: $name: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') executions, no crash"
  else
    echo "fuzz.sh: $name FAILED; see $log"; tail -30 "$log"; status=1
  fi
done
exit $status
