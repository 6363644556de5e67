#include "kernels/decode_attention.h"

#include "kernels/cpu/decode_attention.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& out, int64_t past,
                      float softmax_scale) {
  kernel_device("attention_decode", {&q, &k_cache, &v_cache, &out});
  TESSERA_CHECK(q.ndim() == 3 && k_cache.ndim() == 3 && v_cache.shape() == k_cache.shape() &&
                    k_cache.dim(2) == q.dim(2),
                "attention_decode: q ", shape_str(q.shape()), " and caches ", shape_str(k_cache.shape()), ", ",
                shape_str(v_cache.shape()), " are not [n, heads, d] and [capacity, kv_heads, d]");
  const int64_t n = q.dim(0);
  TESSERA_CHECK(past + n <= k_cache.dim(0), "attention_decode: a cache of ", k_cache.dim(0),
                " positions cannot hold ", past + n);
  check_numel("attention_decode", "out", out, q.numel());
  cpu::attention_decode(q.f32(), k_cache.f32(), v_cache.f32(), out.f32(), n, past, q.dim(1), k_cache.dim(1), q.dim(2),
                        softmax_scale);
}

}  // namespace tessera::kernels
