#!/usr/bin/env bash
# The layer check (scripts/check_layers.py) on this tree: it passes, and on a copy it fails, naming the
# file, the line, the include and the rule, when a layer includes one above it, and naming the
# CMakeLists.txt line to fix when a layer's DEPS lack a layer it includes or list one it does not, and
# when a library source includes a test helper (*_testing.h).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
guard="$root/scripts/check_layers.py"

out=$(python3 "$guard" "$root" 2>&1)
check "the check passes on this tree: $out" $?
grep -q "^check_layers: OK" <<<"$out"
check "the check says OK: $out" $?

# A fresh copy of what the check reads, changed by `edit` (a command run in the copy).
copy() {
  rm -rf "$work/tree" && mkdir "$work/tree"
  cp -r "$root/src" "$root/apps" "$root/bench" "$root/CMakeLists.txt" "$work/tree/"
  (cd "$work/tree" && eval "$1")
}
# expect_check_failure "EDIT" "TEXT": after EDIT, the check exits 1 with a line containing TEXT.
expect_check_failure() {
  copy "$1"
  expect_failure "$2" python3 "$guard" "$work/tree"
}

# comm reaching up into model: the file, its line, the include and the rule.
line=$(($(wc -l < "$root/src/comm/process_group.cc") + 1))
expect_check_failure 'echo "#include \"model/gpt_model.h\"" >> src/comm/process_group.cc' \
  "src/comm/process_group.cc:$line: #include \"model/gpt_model.h\": comm may not include model, a layer above it"
# A file in a subfolder of a layer (kernels/math/) belongs to that layer.
expect_check_failure 'mkdir -p src/kernels/sub && echo "#include \"model/gpt_model.h\"" > src/kernels/sub/x.h' \
  "src/kernels/sub/x.h:1: #include \"model/gpt_model.h\": kernels may not include model, a layer above it"
# A test reaching upward fails too, though tests are not part of the DEPS comparison.
expect_check_failure 'echo "#include \"train/trainer.h\"" >> src/kernels/gemm_test.cc' \
  "src/kernels/gemm_test.cc:"
# pipeline's DEPS without tessera_comm, which src/pipeline includes: the CMake line to fix.
cmake_line=$(grep -n "^tessera_layer(pipeline " "$root/CMakeLists.txt" | cut -d: -f1)
expect_check_failure 'sed -i "s/^tessera_layer(pipeline DEPS tessera_core tessera_comm/tessera_layer(pipeline DEPS tessera_core/" CMakeLists.txt' \
  "CMakeLists.txt:$cmake_line: pipeline lacks tessera_comm: src/pipeline/"
# An extra DEPS entry no source of the layer includes.
expect_check_failure 'sed -i "s/^tessera_layer(pipeline DEPS tessera_core/tessera_layer(pipeline DEPS tessera_core tessera_kernels/" CMakeLists.txt' \
  "CMakeLists.txt:$cmake_line: pipeline links tessera_kernels, which none of its sources includes"
# The tessera binary links what apps/ includes.
expect_check_failure 'sed -i "s/^target_link_libraries(tessera PRIVATE tessera_core /target_link_libraries(tessera PRIVATE /" CMakeLists.txt' \
  "tessera lacks tessera_core: apps/"
# A library source including a test helper (*_testing.h is test code).
line=$(($(wc -l < "$root/src/data/gpt_dataset.cc") + 1))
expect_check_failure 'echo "#include \"core/testing.h\"" >> src/data/gpt_dataset.cc' \
  "src/data/gpt_dataset.cc:$line: #include \"core/testing.h\": a library source may not include a test helper"
# The task layer sits above the rest: eval reaching into tasks fails.
expect_check_failure 'echo "#include \"tasks/msdp.h\"" >> src/eval/detokenizer.cc' \
  "eval may not include tasks, a layer above it"
# A new folder under src/ must take its place in the order.
expect_check_failure 'mkdir src/moe && touch src/moe/router.cc' "src/moe/: not in the layer order"

finish layer_check_cli
