#!/usr/bin/env bash
# The per-element math shared by host and device (core/host_device.h marks it: kernels/math/*.h,
# core/philox.h, kernels/vector_math.h) compiles with nvcc for the device, under the flags a CUDA
# backend would use (warnings as errors), and the host code nvcc builds from it gives bitwise the
# values the g++ build gives. No GPU is needed. Without the CUDA toolkit it is skipped.
# Usage: host_device_headers.sh [path/to/tessera] (the argument CTest passes is not used)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tests/lib/checks.sh"
# The toolkit lives outside Debian's packages, at its standard prefix (or CUDA_HOME).
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
[ -x "$nvcc" ] || skip "no CUDA toolkit: $nvcc not found"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src="$root/tests/cuda/host_device_headers.cu"
# --expt-relaxed-constexpr: the headers call constexpr std:: functions (bit_cast, min) from device code.
flags=(-std=c++20 --expt-relaxed-constexpr -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror -I "$root/src")

out=$("$nvcc" "${flags[@]}" -arch=sm_90 -c "$src" -o "$work/device.o" 2>&1)
check "nvcc compiles the shared headers for sm_90: $out" $?
# The device code is really there: the kernel's PTX calls every function (inlined), so it is not empty.
out=$("$nvcc" "${flags[@]}" -arch=sm_90 --ptx "$src" -o "$work/device.ptx" 2>&1) &&
  grep -q "shared_math_kernel" "$work/device.ptx"
check "the PTX holds shared_math_kernel: $out" $?

out=$("$nvcc" "${flags[@]}" -arch=sm_90 "$src" -o "$work/nvcc_host" 2>&1)
check "nvcc builds the host program: $out" $?
out=$(g++ -std=gnu++20 -O2 -Wall -Wextra -Werror -x c++ -I "$root/src" "$src" -o "$work/gxx_host" 2>&1)
check "g++ builds the same file as C++: $out" $?
if [ -x "$work/nvcc_host" ] && [ -x "$work/gxx_host" ]; then
  "$work/nvcc_host" > "$work/nvcc.txt" && "$work/gxx_host" > "$work/gxx.txt"
  check "both host programs run" $?
  [ -s "$work/gxx.txt" ] && cmp -s "$work/nvcc.txt" "$work/gxx.txt"
  ok=$?; check "nvcc's host build and g++'s give bitwise the same values: $(diff "$work/nvcc.txt" "$work/gxx.txt" | head -6)" $ok
fi
finish host_device_headers
