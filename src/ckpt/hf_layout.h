// The exact re-layouts shared by the Hugging Face conversions (hf_convert.cc, hf_bert.cc): whole fp32
// tensors, copied, never rounded.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera::ckpt::hf_layout {

// The transpose of a 2-D tensor (GPT-2's Conv1D weights are [in, out]).
Tensor transpose2d(const Tensor& t);
// Rows [begin, begin + n) of a [rows, ...] tensor.
Tensor rows(const Tensor& t, int64_t begin, int64_t n);
Tensor concat_rows(const std::vector<Tensor>& parts);

// Megatron's fused QKV rows (per query group: `per_group` query heads, one key head, one value head,
// each `d` rows) <-> separate Q, K and V row blocks (heads in order). Works for weights and biases.
struct Qkv {
  Tensor q, k, v;
};
Qkv split_qkv(const Tensor& qkv, int64_t groups, int64_t per_group, int64_t d);
Tensor merge_qkv(const Qkv& x, int64_t groups, int64_t per_group, int64_t d);

}  // namespace tessera::ckpt::hf_layout
