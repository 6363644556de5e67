#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ with clang (-fsanitize=fuzzer,address,undefined) and runs each
# for RUNS executions (default 100000) from its seed corpus fuzz/corpus/<target>/ (and its dictionary
# fuzz/dict/<target>.dict where there is one), printing libFuzzer's counts. A crash, a sanitizer
# report or a broken invariant leaves its input (crash-*) in build/fuzz/ and makes the script fail
# (exit 1). Exits 77 ("skipped") when clang is missing. Inputs found along the way go to
# build/fuzz/corpus/<target>/, never into the repository. The normal CMake build does not see fuzz/.
#   scripts/fuzz.sh [RUNS] [TARGET...]     (no TARGET: all of them)
#   CLANGXX=clang++-15 scripts/fuzz.sh     (another clang); TESSERA_DATA_CACHE: GPT-2's files;
#   TESSERA_FUZZ_DIR: where to build and run (default build/fuzz); FUZZ_MAX_LEN: the longest input
#   (default 4096; SentencePiece slows to ~200 exec/s as its inputs approach that); FUZZ_OPT: the
#   optimisation and debug flags (default -O1; tests/fuzz_cli.sh's short runs use "-O0 -g0": -O0 compiles
#   in half the time, no debug information saves 30% more, the sanitizers' checks the same); FUZZ_TIMEOUT: seconds
#   before libFuzzer calls one input a hang (default 10; raise it on a loaded machine, where a 0.5 s input
#   has been seen to take 13 s); ASAN_OPTIONS: by default malloc_context_size=0 (no allocation stacks: below)
set -euo pipefail
runs=${1:-100000}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
out=${TESSERA_FUZZ_DIR:-$root/build/fuzz}  # binaries, logs, found inputs, crashes
export TESSERA_DATA_CACHE=${TESSERA_DATA_CACHE:-$root/data-cache}

# The targets, in one place: name -> sources beyond fuzz/<name>.cc and the core files, then libraries.
core="core/tensor.cc core/allocator.cc core/host_allocator.cc core/file_io.cc ckpt/crc32c.cc"
declare -A sources=(
  [safetensors_fuzzer]="ckpt/safetensors.cc"
  [checkpoint_index_fuzzer]="ckpt/checkpoint_index.cc ckpt/reshard.cc"
  [indexed_dataset_fuzzer]="data/indexed_dataset.cc"
  [text_generation_api_fuzzer]="infer/text_generation_api.cc infer/openai_completions.cc data/null_tokenizer.cc"
  [openai_chat_fuzzer]="infer/openai_chat.cc infer/chat_template.cc infer/text_generation_api.cc infer/openai_completions.cc data/null_tokenizer.cc"
  [gpt2_bpe_fuzzer]="data/gpt2_bpe_tokenizer.cc"
  [sentencepiece_fuzzer]="data/sentencepiece_tokenizer.cc data/gpt2_bpe_tokenizer.cc"
  [preprocess_jsonl_fuzzer]="data/preprocess.cc data/indexed_dataset.cc data/sentence_splitter.cc"
  [bert_wordpiece_fuzzer]="data/bert_wordpiece_tokenizer.cc data/gpt2_bpe_tokenizer.cc"
  [hf_config_fuzzer]="ckpt/hf_config.cc ckpt/hf_moe_config.cc model/config.cc model/mla_config.cc"
  [hf_shard_index_fuzzer]="ckpt/hf_config.cc ckpt/hf_moe_config.cc model/config.cc model/mla_config.cc"
  [pickle_reader_fuzzer]="ckpt/pickle_reader.cc"
  [zip_reader_fuzzer]="ckpt/zip_reader.cc ckpt/pickle_reader.cc ckpt/torch_file.cc"
)
declare -A libs=(
  [gpt2_bpe_fuzzer]="-lpcre2-8"
  [bert_wordpiece_fuzzer]="-lpcre2-8"
  [sentencepiece_fuzzer]="-lsentencepiece -lsentencepiece_train -lpcre2-8"
)
all=(safetensors_fuzzer checkpoint_index_fuzzer indexed_dataset_fuzzer text_generation_api_fuzzer openai_chat_fuzzer gpt2_bpe_fuzzer
     sentencepiece_fuzzer bert_wordpiece_fuzzer preprocess_jsonl_fuzzer hf_config_fuzzer hf_shard_index_fuzzer
     pickle_reader_fuzzer zip_reader_fuzzer)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [ -n "${sources[$t]+x}" ] || { echo "fuzz.sh: unknown target '$t' (targets: ${all[*]})" >&2; exit 2; }
done
[[ $runs =~ ^[0-9]+$ ]] || { echo "fuzz.sh: RUNS='$runs' must be a number of executions" >&2; exit 2; }

cxx=${CLANGXX:-clang++}
command -v "$cxx" >/dev/null || { echo "fuzz.sh: skipped: $cxx not found (scripts/setup.sh installs clang)" >&2; exit 77; }
launcher=()
command -v ccache >/dev/null && launcher=(ccache)
# shellcheck disable=SC2206
flags=(-std=c++20 -g ${FUZZ_OPT:--O1} -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -I"$root/src")

# The library sources of the chosen targets compile as one translation unit (they share nlohmann-json's
# instantiations, whose code generation under the sanitizers is most of the time: 25 files 75 s apart,
# 24 s as one), then each harness compiles on its own and links against it and every target's libraries.
# lld with --gc-sections keeps only the code a harness reaches: the unit also holds functions that call
# code no target links (text_generation_api's run_text_request calls the generator), which GNU ld's
# garbage collection keeps alive through the sanitizer-coverage tables and then refuses as undefined.
mkdir -p "$out/obj"
declare -A seen=()
declare -a lib_sources=() lib_flags=()
for t in "${targets[@]}"; do
  for s in ${sources[$t]} $core; do
    [ -n "${seen[$s]+x}" ] || { seen[$s]=1; lib_sources+=("$s"); }
  done
  # shellcheck disable=SC2206
  lib_flags+=(${libs[$t]:-})
done
unity=$out/obj/fuzz_sources_unity.cc
printf '#include "%s"\n' "${lib_sources[@]/#/$root/src/}" > "$unity"
echo "fuzz.sh: building the sources of ${#targets[@]} target(s) (${#lib_sources[@]} files as one unit)"
"${launcher[@]}" "$cxx" "${flags[@]}" -fsanitize=fuzzer-no-link -ffunction-sections -c "$unity" -o "$out/obj/fuzz_sources_unity.o"
# shellcheck disable=SC2207
lib_flags=($(printf '%s\n' "${lib_flags[@]}" | awk '!seen[$0]++'))  # each library once, in first-seen order
for t in "${targets[@]}"; do
  echo "fuzz.sh: building $t"
  "${launcher[@]}" "$cxx" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$root/fuzz/$t.cc" -o "$out/obj/$t.o"
  "$cxx" "${flags[@]}" -fsanitize=fuzzer -fuse-ld=lld -Wl,--gc-sections "$out/obj/$t.o" "$out/obj/fuzz_sources_unity.o" "${lib_flags[@]}" -o "$out/$t"
done

# ASan records each allocation's stack in a depot that grows with every distinct stack; on SentencePiece
# (many allocations per input) the depot came to take 38 % of the time and a run slowed from ~500 to ~80
# executions a second over 600,000. Without those stacks a crash is still caught and its input kept;
# rerun the input with ASAN_OPTIONS=malloc_context_size=30 for the allocation's stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-malloc_context_size=0}
status=0
for t in "${targets[@]}"; do
  mkdir -p "$out/corpus/$t"
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  log=$out/$t.log
  echo "fuzz.sh: running $t for $runs executions"
  rc=0
  (cd "$out" && nice ./"$t" -runs="$runs" -max_len="${FUZZ_MAX_LEN:-4096}" -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -print_final_stats=1 -error_exitcode=1 \
     "${dict[@]}" "$out/corpus/$t" "$root/fuzz/corpus/$t" >"$log" 2>&1) || rc=$?
  stat() { grep -o "stat::$1: *[0-9]*" "$log" | grep -o '[0-9]*$' || echo "?"; }
  if [ $rc -eq 0 ]; then
    echo "fuzz.sh: $t: $(stat number_of_executed_units) executions," \
         "$(grep -o 'in [0-9]* second' "$log" | tail -1 | grep -o '[0-9]*')s, $(stat average_exec_per_sec) exec/s," \
         "$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1), no crash"
  elif [ $rc -eq 77 ]; then
    echo "fuzz.sh: $(grep -m1 "^$t: skipped" "$log")"  # the target says why
  else
    echo "fuzz.sh: $t FAILED (exit $rc); see $log"; tail -30 "$log"; status=1
  fi
done
exit $status
