#include "kernels/decode_attention.h"

#include "kernels/cpu/decode_attention.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

// The pools are [blocks, block size, kv_heads, d], every block id is one of them, and the rows add up.
void check_paged(const char* kernel, const Tensor& rows, const Tensor& k_pool, const Tensor& v_pool,
                 std::span<const PagedRows> sequences) {
  TESSERA_CHECK(k_pool.ndim() == 4 && v_pool.shape() == k_pool.shape(), kernel, ": pools ", shape_str(k_pool.shape()),
                ", ", shape_str(v_pool.shape()), " are not [blocks, block size, kv_heads, d]");
  int64_t total = 0;
  for (const PagedRows& s : sequences) {
    total += s.rows;
    for (int32_t b : s.blocks)
      TESSERA_CHECK(b >= 0 && b < k_pool.dim(0), kernel, ": block ", b, " is not in the pool of ", k_pool.dim(0));
  }
  TESSERA_CHECK(rows.ndim() == 3 && rows.dim(0) == total, kernel, ": ", shape_str(rows.shape()), " rows for ",
                sequences.size(), " sequences of ", total, " rows in all");
}

}  // namespace

void attention_decode(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const Tensor& out,
                      std::span<const PagedRows> sequences, float softmax_scale) {
  kernel_device("attention_decode", {&q, &k_pool, &v_pool, &out});
  check_paged("attention_decode", q, k_pool, v_pool, sequences);
  TESSERA_CHECK(k_pool.dim(3) == q.dim(2), "attention_decode: q ", shape_str(q.shape()), " and pools ",
                shape_str(k_pool.shape()), " differ in head dim");
  check_numel("attention_decode", "out", out, q.numel());
  cpu::attention_decode(q.f32(), k_pool.f32(), v_pool.f32(), out.f32(), sequences, k_pool.dim(1), q.dim(1),
                        k_pool.dim(2), q.dim(2), softmax_scale);
}

void write_kv_cache(const Tensor& k, const Tensor& v, const Tensor& k_pool, const Tensor& v_pool,
                    std::span<const PagedRows> sequences) {
  kernel_device("write_kv_cache", {&k, &v, &k_pool, &v_pool});
  check_paged("write_kv_cache", k, k_pool, v_pool, sequences);
  TESSERA_CHECK(v.shape() == k.shape() && k.dim(1) == k_pool.dim(2) && k.dim(2) == k_pool.dim(3),
                "write_kv_cache: keys ", shape_str(k.shape()), ", values ", shape_str(v.shape()), " and pools ",
                shape_str(k_pool.shape()), " differ");
  cpu::write_kv_cache(k.f32(), v.f32(), k_pool.f32(), v_pool.f32(), sequences, k_pool.dim(1), k.dim(1), k.dim(2));
}

}  // namespace tessera::kernels
