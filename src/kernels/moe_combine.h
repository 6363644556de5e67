// The arithmetic between a mixture-of-experts layer's routing and its outputs that the routing
// kernels (kernels/moe_routing.h) leave out: rows scaled by their probabilities, gradients put back in
// the routing entries' slots, and DeepSpeed-MoE's residual mix. Dispatched on the tensors' device
// (kernels/device_dispatch.h; the CPU code is kernels/cpu/moe_combine.h).
#pragma once

#include "core/tensor.h"

namespace tessera::kernels {

// rows[r, :] *= weight[r] for rows [R, h], in place.
void scale_rows(const Tensor& rows, const Tensor& weight);
// out[slot[r]] += values[r] where slot[r] >= 0 (values fp32 [R], slot int32 [R], out fp32 of any shape).
void scatter_slot_values(const Tensor& values, const Tensor& slot, const Tensor& out);

// Residual MoE: c = softmax(logits[t, 0:2]), y[t] = c0 a[t] + c1 b[t] (a, b, y [T, h]; logits [T, 2]).
void two_way_mix_forward(const Tensor& a, const Tensor& b, const Tensor& logits, const Tensor& y);
// da = c0 dy, db = c1 dy (overwritten), dlogits [T, 2] overwritten with the softmax's gradient.
void two_way_mix_backward(const Tensor& a, const Tensor& b, const Tensor& logits, const Tensor& dy, const Tensor& da,
                          const Tensor& db, const Tensor& dlogits);

}  // namespace tessera::kernels
