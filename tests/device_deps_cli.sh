#!/usr/bin/env bash
# The device check's fallback (issue 39, item 7): scripts/pack_device_deps.sh packs every Debian library
# `tessera` loads (but glibc's, gcc's and CUDA's), and scripts/build_on_device.sh configures the project
# against that prefix alone, CMake told to ignore /usr and /usr/local and pkg-config kept out, as on the
# GPU machine where none of the packages is installed. (Building there is checked by hand; README, "GPU".)
# Skipped where the packages are not installed from Debian (no dpkg) or Open MPI's plugins are absent.
set -uo pipefail
tessera=${1:?usage: device_deps_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tests/lib/checks.sh"
build=$(cd "$(dirname "$tessera")" && pwd)
command -v dpkg >/dev/null || skip "no dpkg: the dependencies are not Debian packages here"
[ -f /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_ess_singleton.so ] || skip "no Debian Open MPI plugins here"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

out=$("$root/scripts/pack_device_deps.sh" "$build" "$work/deps.tar.gz" 2>&1); ok=$?
check "pack_device_deps.sh packs the prefix: $out" $ok
size=$(stat -c %s "$work/deps.tar.gz" 2>/dev/null || echo 0)
[ "$size" -gt 0 ] && [ "$size" -lt $((30 << 20)) ]; ok=$?
check "the packed prefix is under 30 MiB (the device tool carries 64 MiB in all): $size bytes" $ok

# Every library tessera loads is in the prefix under its soname, but glibc's, gcc's and CUDA's.
mkdir -p "$work/list" && tar -C "$work/list" -xzf "$work/deps.tar.gz"
missing=$(ldd "$tessera" | awk '$2 == "=>" {print $1}' |
          grep -vE '^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libgomp|libcu[a-z]*)\.so' |
          while read -r so; do [ -e "$work/list/lib/x86_64-linux-gnu/$so" ] || echo "$so"; done)
[ -z "$missing" ]; ok=$?
check "the prefix holds every library tessera loads: missing $missing" $ok
for f in deps.cmake include/oneapi/dnnl/dnnl.hpp include/httplib.h include/openssl/configuration.h \
         lib/x86_64-linux-gnu/libgtest.a lib/x86_64-linux-gnu/openmpi/include/mpi.h \
         lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_ess_singleton.so; do
  [ -e "$work/list/$f" ]; ok=$?
  check "the prefix holds $f" $ok
done
broken=$(find "$work/list" -xtype l)
[ -z "$broken" ]; ok=$?
check "no link in the prefix is broken: $broken" $ok

# Configure against the prefix only: with CUDA where this machine has the toolkit (glibc's librt, which
# CUDA's static runtime names, is the one library taken from /usr, as on the device).
rt=$(find /usr/lib/x86_64-linux-gnu -maxdepth 1 -name 'librt.*' | sort | head -1)
out=$(BUILD_ON_DEVICE_CONFIGURE_ONLY=1 bash "$root/scripts/build_on_device.sh" "$work/deps.tar.gz" "$work/build" \
        -DTESSERA_CUDA=AUTO "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local;/" ${rt:+-DCUDAToolkit_rt_LIBRARY=$rt} 2>&1); ok=$?
check "build_on_device.sh configures against the prefix alone: $out" $ok
prefix=$work/deps
outside=$(grep -E '^(dnnl|GTest|CLI11|nlohmann_json)_DIR:|^(OpenCL|PCRE2|SENTENCEPIECE|HTTPLIB)_[A-Za-z0-9_+-]*(LIBRARY|INCLUDE_DIR):|^MPI_(mpi|mpi_cxx)_LIBRARY:' \
          "$work/build/CMakeCache.txt" 2>/dev/null | grep -v "=$prefix/")
n=$(grep -cE '^(dnnl|GTest|CLI11|nlohmann_json)_DIR:|^MPI_mpi_LIBRARY:|^(PCRE2|HTTPLIB)_INCLUDE_DIR:' "$work/build/CMakeCache.txt" 2>/dev/null)
[ -z "$outside" ] && [ "$n" = 7 ]; ok=$?
check "every dependency is found in the prefix ($n of 7 looked at): outside it: $outside" $ok
grep -q 'without pkg-config' "$work/build.configure.log"; ok=$?
check "PCRE2, SentencePiece and cpp-httplib are found without pkg-config: $(grep Tessera "$work/build.configure.log")" $ok
finish device_deps_cli
