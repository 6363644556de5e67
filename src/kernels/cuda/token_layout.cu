// The token-layout copies on the GPU (kernels/cuda/token_layout.h): each kernel is a grid-stride loop
// with one thread per element of the larger side, computing where that element comes from with the
// index arithmetic of the CPU loops (kernels/cpu/token_layout.cc). first_id_outside takes the smallest
// failing index with an atomicMin, which does not depend on the order the threads run in.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/allocator.h"
#include "core/check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/token_layout.h"

namespace tessera::kernels::cuda {
namespace {

// One thread per element of dst [cols, rows]: consecutive threads write consecutive elements.
template <typename T>
__global__ void transpose_kernel(const T* src, T* dst, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t e = grid_index(); e < n; e += grid_stride()) {
    const int64_t j = e / rows, i = e % rows;  // dst[j, i] = src[i, j]
    dst[e] = src[i * cols + j];
  }
}

template <typename T>
void transpose(const void* src, void* dst, int64_t rows, int64_t cols) {
  transpose_kernel<T><<<grid_for(rows * cols), kThreads, 0, launch_stream()>>>(static_cast<const T*>(src),
                                                                               static_cast<T*>(dst), rows, cols);
}

__global__ void fill_positions_kernel(int32_t* positions, int64_t n, int64_t batch, int64_t first) {
  for (int64_t t = grid_index(); t < n; t += grid_stride()) positions[t] = static_cast<int32_t>(first + t / batch);
}

// Where element e of qkv [rows, groups * (per_group + 2) * d] belongs: part 0, 1, 2 (q, k, v) at
// `offset` in that tensor, by the CPU loops' index arithmetic.
struct QkvPlace {
  int part;
  int64_t offset;
};
__device__ inline QkvPlace qkv_place(int64_t e, int64_t groups, int64_t per_group, int64_t d) {
  const int64_t group_width = (per_group + 2) * d, row_width = groups * group_width;
  const int64_t t = e / row_width, g = (e % row_width) / group_width, j = e % group_width;
  if (j < per_group * d) return {0, (t * groups * per_group + g * per_group) * d + j};
  if (j < (per_group + 1) * d) return {1, (t * groups + g) * d + (j - per_group * d)};
  return {2, (t * groups + g) * d + (j - (per_group + 1) * d)};
}

// One thread per element of qkv (n of them), read (split) or written (merge).
__global__ void split_qkv_kernel(const float* qkv, float* q, float* k, float* v, int64_t n, int64_t groups,
                                 int64_t per_group, int64_t d) {
  for (int64_t e = grid_index(); e < n; e += grid_stride()) {
    const QkvPlace p = qkv_place(e, groups, per_group, d);
    (p.part == 0 ? q : p.part == 1 ? k : v)[p.offset] = qkv[e];
  }
}

__global__ void merge_qkv_kernel(const float* q, const float* k, const float* v, float* qkv, int64_t n,
                                 int64_t groups, int64_t per_group, int64_t d) {
  for (int64_t e = grid_index(); e < n; e += grid_stride()) {
    const QkvPlace p = qkv_place(e, groups, per_group, d);
    qkv[e] = (p.part == 0 ? q : p.part == 1 ? k : v)[p.offset];
  }
}

// *first = min(*first, i) over the ids outside [lo, hi) (*first starts at n).
__global__ void first_outside_kernel(const int32_t* ids, int64_t n, int64_t lo, int64_t hi,
                                     unsigned long long* first) {
  for (int64_t i = grid_index(); i < n; i += grid_stride())
    if (ids[i] < lo || ids[i] >= hi) atomicMin(first, static_cast<unsigned long long>(i));
}

}  // namespace

void transpose_rows(const void* src, void* dst, int64_t rows, int64_t cols, size_t elem_bytes) {
  if (rows * cols == 0) return;
  switch (elem_bytes) {
    case 1: transpose<uint8_t>(src, dst, rows, cols); break;
    case 2: transpose<uint16_t>(src, dst, rows, cols); break;
    case 4: transpose<uint32_t>(src, dst, rows, cols); break;
    case 8: transpose<uint64_t>(src, dst, rows, cols); break;
    default: TESSERA_CHECK(false, "transpose_rows: elements of ", elem_bytes, " bytes (1, 2, 4 or 8 only)");
  }
  check_launch("transpose_rows");
}

void fill_positions(int32_t* positions, int64_t seq, int64_t batch, int64_t first) {
  if (seq * batch == 0) return;
  fill_positions_kernel<<<grid_for(seq * batch), kThreads, 0, launch_stream()>>>(positions, seq * batch, batch, first);
  check_launch("fill_positions");
}

void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t rows, int64_t groups, int64_t per_group,
               int64_t d) {
  const int64_t n = rows * groups * (per_group + 2) * d;
  if (n == 0) return;
  split_qkv_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(qkv, q, k, v, n, groups, per_group, d);
  check_launch("split_qkv");
}

void merge_qkv(const float* q, const float* k, const float* v, float* qkv, int64_t rows, int64_t groups,
               int64_t per_group, int64_t d) {
  const int64_t n = rows * groups * (per_group + 2) * d;
  if (n == 0) return;
  merge_qkv_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(q, k, v, qkv, n, groups, per_group, d);
  check_launch("merge_qkv");
}

int64_t first_id_outside(const int32_t* ids, int64_t n, int64_t lo, int64_t hi, int device, int32_t* id) {
  if (n == 0) return -1;
  // The index, from the device's caching allocator (stream-ordered: freed right after the copies,
  // which wait for the kernel).
  Allocator& allocator = allocator_for(Device{DeviceType::CUDA, device});
  auto* first = static_cast<unsigned long long*>(allocator.allocate(sizeof(unsigned long long), 256));
  unsigned long long index = static_cast<unsigned long long>(n);
  try {
    copy_and_wait(first, &index, sizeof index, cudaMemcpyHostToDevice, "first_id_outside");
    first_outside_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(ids, n, lo, hi, first);
    check_launch("first_id_outside");
    copy_and_wait(&index, first, sizeof index, cudaMemcpyDeviceToHost, "first_id_outside");
    if (index < static_cast<unsigned long long>(n))
      copy_and_wait(id, ids + index, sizeof(int32_t), cudaMemcpyDeviceToHost, "first_id_outside");
  } catch (...) {
    allocator.deallocate(first, sizeof(unsigned long long));
    throw;
  }
  allocator.deallocate(first, sizeof(unsigned long long));
  return index < static_cast<unsigned long long>(n) ? static_cast<int64_t>(index) : -1;
}

}  // namespace tessera::kernels::cuda
