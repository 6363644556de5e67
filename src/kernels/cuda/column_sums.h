// Column sums on the GPU in kernels/math/column_sums.h's fixed order, the CPU's too, so that both give
// the same bits (kernels/cuda/column_sums.cu): step 1 with one thread per (chunk of rows, column), many
// blocks, then step 2 with one thread per column over the chunks' partials. Declared in every build,
// defined only in a CUDA one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::kernels::cuda {

// A scratch buffer of `count` floats on the current device, from its caching allocator (stream-ordered:
// freed when it goes out of scope, after the kernels launched before on the same stream).
class DeviceScratch {
 public:
  explicit DeviceScratch(int64_t count);
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  float* data() const { return data_; }

 private:
  float* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

// out[c] += the sum of x[r, c] over the rows r of x [rows, cols] (the linear layer's bias gradient).
void column_sums(const float* x, float* out, int64_t rows, int64_t cols);
// Step 2 alone, for kernels that write their own partials: out[c] += (float) (the double sum over k in
// order of partial[k * cols + c]); and the same of partial2 into out2 in the same launch where out2 is
// given (a norm's dw and db).
void sum_column_partials(const float* partial, int64_t chunks, int64_t cols, float* out,
                         const float* partial2 = nullptr, float* out2 = nullptr);

}  // namespace tessera::kernels::cuda
