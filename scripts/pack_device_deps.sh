#!/usr/bin/env bash
# The fallback of the device check (issue 39, item 7): where a bundle built here will not run on the GPU
# machine (its CPU lacks an instruction -march=native chose here, its toolkit or driver differs, ...), the
# device builds the same bundle from source with scripts/build_on_device.sh. That machine has the CUDA
# toolkit, gcc, CMake and ninja but none of Tessera's Debian packages, so this packs them here into a
# prefix laid out as /usr (PREFIX/include, PREFIX/lib/x86_64-linux-gnu, PREFIX/share), where the
# packages' own CMake config files, which locate everything relative to themselves, work unchanged:
#   - each -dev package's headers, CMake config files, link-time .so symlinks and GoogleTest's static
#     libraries (no pkg-config files: the device may have no pkg-config, and CMakeLists.txt finds
#     PCRE2, SentencePiece and cpp-httplib without it);
#   - every shared library `tessera` and Open MPI's plugins load, but glibc's, gcc's (libstdc++,
#     libgcc_s, libgomp: the device's gcc brings its own) and CUDA's, with their soname links, all in
#     PREFIX/lib/x86_64-linux-gnu (flattened: the device build puts that one folder on the loader's path);
#   - Open MPI's plugins (`tessera` loads them as an MPI singleton);
#   - PREFIX/deps.cmake, an initial cache (cmake -C) pointing every find_package at the prefix.
# The libraries are Debian 12's binaries (glibc >= 2.36, libstdc++ of gcc >= 12), as the bundle's are:
# the fallback rebuilds Tessera's own code on the device, not its dependencies.
#   scripts/pack_device_deps.sh [BUILD_DIR (build/release)] [OUT (build/device-deps.tar.gz)]
# BUILD_DIR's `tessera` (built if missing) says which shared libraries to carry. Then the device tool's
#   run(command="bash scripts/build_on_device.sh && bash scripts/gpu_check.sh",
#       carry=["build/device-deps.tar.gz"], timeout_s=600).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
out=${2:-$root/build/device-deps.tar.gz}
arch=x86_64-linux-gnu
# The -dev packages of the libraries CMakeLists.txt finds, and of the headers theirs include
# (httplib.h: OpenSSL, zlib, brotli; oneDNN's config: OpenCL; GoogleTest's config: GMock's targets).
dev_packages=(libdnnl-dev libopenmpi-dev libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev
              libpcre2-dev libsentencepiece-dev libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev
              opencl-c-headers ocl-icd-opencl-dev)
mpi_plugins=/usr/lib/$arch/openmpi/lib/openmpi3
[ -f "$build/build.ninja" ] || { echo "pack_device_deps: $build is not a configured build (scripts/build.sh release)" >&2; exit 2; }
[ -f "$mpi_plugins/mca_ess_singleton.so" ] || { echo "pack_device_deps: no Open MPI plugins in $mpi_plugins" >&2; exit 2; }
cmake --build "$build" --target tessera >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
lib=$prefix/lib/$arch
mkdir -p "$lib"

# Shared libraries: each real file under its own name plus its soname link, as Debian has them (oneDNN's
# CMake targets name libdnnl.so.2.6 itself).
for f in "$build/tessera" "$mpi_plugins"/*.so; do ldd "$f"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r soname path; do
  case $soname in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*|libgomp.so.*) continue ;;
  esac
  case $path in /usr/local/cuda*) continue ;; esac
  real=$(readlink -f "$path")
  cp "$real" "$lib/"
  [ "$(basename "$real")" = "$soname" ] || ln -sf "$(basename "$real")" "$lib/$soname"
done

# The -dev packages' files (dpkg -L lists folders too; only files and links are copied). Link-time .so
# links are remade relative, to the library copied above (Open MPI's go through /etc/alternatives);
# those of libraries Tessera does not load (Open MPI's Fortran and Java ones) are left out.
dpkg -L "${dev_packages[@]}" | sort -u | grep -E "^/usr/(include/|share/cmake/|lib/$arch/(cmake/|openmpi/include/|lib(gtest|gmock)[a-z_]*\.a$|[^/]*\.so$|openmpi/lib/[^/]*\.so$))" |
  while read -r f; do
  [ -f "$f" ] || continue
  dst=$prefix${f#/usr}
  mkdir -p "$(dirname "$dst")"
  if [[ $f == *.so ]]; then
    target=$lib/$(basename "$(readlink -f "$f")")
    if [ -f "$target" ]; then ln -sfr "$target" "$dst"; fi
  else
    cp -L "$f" "$dst"
  fi
done
# OpenSSL's configuration headers sit in Debian's multiarch folder (/usr/include/x86_64-linux-gnu), which
# gcc searches by itself but not under a prefix: they join the others.
mv "$prefix/include/$arch/openssl/"* "$prefix/include/openssl/" && rm -r "$prefix/include/$arch"
cp -rL "$mpi_plugins" "$lib/openmpi/lib/"

# The initial cache: each package found at the prefix, whatever the device has elsewhere. FindMPI gets
# Open MPI's libraries and headers directly (there is no mpicxx wrapper to ask); pkg-config is kept out,
# so CMakeLists.txt finds PCRE2, SentencePiece and cpp-httplib under CMAKE_PREFIX_PATH.
cat > "$prefix/deps.cmake" <<'EOF'
# Written by scripts/pack_device_deps.sh: cmake -C PREFIX/deps.cmake finds Tessera's Debian dependencies here.
set(p "${CMAKE_CURRENT_LIST_DIR}")
set(lib "${p}/lib/x86_64-linux-gnu")
set(CMAKE_PREFIX_PATH "${p}" CACHE PATH "")
set(CMAKE_DISABLE_FIND_PACKAGE_PkgConfig ON CACHE BOOL "")
set(dnnl_DIR "${lib}/cmake/dnnl" CACHE PATH "")
set(OpenCL_INCLUDE_DIR "${p}/include" CACHE PATH "")
set(OpenCL_LIBRARY "${lib}/libOpenCL.so" CACHE FILEPATH "")
set(GTest_DIR "${lib}/cmake/GTest" CACHE PATH "")
set(CLI11_DIR "${p}/share/cmake/CLI11" CACHE PATH "")
set(nlohmann_json_DIR "${p}/share/cmake/nlohmann_json" CACHE PATH "")
set(MPI_SKIP_COMPILER_WRAPPER ON CACHE BOOL "")
set(MPI_ASSUME_NO_BUILTIN_MPI ON CACHE BOOL "")
set(MPI_CXX_COMPILER_INCLUDE_DIRS "${lib}/openmpi/include;${lib}/openmpi/include/openmpi" CACHE STRING "")
set(MPI_CXX_LIB_NAMES "mpi_cxx;mpi" CACHE STRING "")
set(MPI_mpi_cxx_LIBRARY "${lib}/openmpi/lib/libmpi_cxx.so" CACHE FILEPATH "")
set(MPI_mpi_LIBRARY "${lib}/openmpi/lib/libmpi.so" CACHE FILEPATH "")
EOF

mkdir -p "$(dirname "$out")"
tar -C "$prefix" -czf "$out" .
echo "pack_device_deps: $(find "$lib" -maxdepth 1 -name '*.so.*' -type f | wc -l) libraries, $(find "$lib/openmpi/lib/openmpi3" -name '*.so' | wc -l) Open MPI plugins, $(find "$prefix/include" -type f | wc -l) headers: $(du -sh "$prefix" | cut -f1) in $out, packed $(du -sh "$out" | cut -f1)"
