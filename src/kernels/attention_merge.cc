#include "kernels/attention_merge.h"

#include "kernels/cpu/attention_merge.h"
#include "kernels/cuda/attention_merge.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void attention_merge_into(const Tensor& out, const Tensor& lse, const Tensor& part_out, const Tensor& part_lse,
                          int64_t seq, int64_t batch, int64_t heads, int64_t head_dim) {
  const Device d = kernel_device("attention_merge_into", {&out, &lse, &part_out, &part_lse}, Impl::kCpuAndCuda);
  const int64_t rows = seq * batch * heads;
  check_numel("attention_merge_into", "out", out, rows * head_dim);
  check_numel("attention_merge_into", "part_out", part_out, rows * head_dim);
  check_numel("attention_merge_into", "lse", lse, rows);
  check_numel("attention_merge_into", "part_lse", part_lse, rows);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::attention_merge_into(out.f32(), lse.f32(), part_out.f32(), part_lse.f32(), seq, batch, heads,
                                        head_dim);
  cpu::attention_merge_into(out.f32(), lse.f32(), part_out.f32(), part_lse.f32(), seq, batch, heads, head_dim);
}

}  // namespace tessera::kernels
