#include "ckpt/hf_layout.h"

#include <algorithm>

namespace tessera::ckpt::hf_layout {

Tensor transpose2d(const Tensor& t) {
  const int64_t r = t.shape()[0], c = t.shape()[1];
  Tensor out = Tensor::empty({c, r});
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out.host_f32()[j * r + i] = t.host_f32()[i * c + j];
  return out;
}

Tensor rows(const Tensor& t, int64_t begin, int64_t n) {
  Shape s = t.shape();
  int64_t inner = t.numel() / s[0];
  s[0] = n;
  return t.flat_range(begin * inner, n * inner).view(s).clone();
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  Shape s = parts.at(0).shape();
  int64_t total = 0;
  for (const Tensor& p : parts) total += p.shape()[0];
  s[0] = total;
  Tensor out = Tensor::empty(s);
  int64_t at = 0;
  for (const Tensor& p : parts) {
    std::copy(p.host_f32(), p.host_f32() + p.numel(), out.host_f32() + at);
    at += p.numel();
  }
  return out;
}

Qkv split_qkv(const Tensor& qkv, int64_t groups, int64_t per_group, int64_t d) {
  std::vector<Tensor> q, k, v;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t base = g * (per_group + 2) * d;
    q.push_back(rows(qkv, base, per_group * d));
    k.push_back(rows(qkv, base + per_group * d, d));
    v.push_back(rows(qkv, base + (per_group + 1) * d, d));
  }
  return {concat_rows(q), concat_rows(k), concat_rows(v)};
}
Tensor merge_qkv(const Qkv& x, int64_t groups, int64_t per_group, int64_t d) {
  std::vector<Tensor> parts;
  for (int64_t g = 0; g < groups; ++g) {
    parts.push_back(rows(x.q, g * per_group * d, per_group * d));
    parts.push_back(rows(x.k, g * d, d));
    parts.push_back(rows(x.v, g * d, d));
  }
  return concat_rows(parts);
}

}  // namespace tessera::ckpt::hf_layout
