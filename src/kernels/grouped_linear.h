// Linear layers of one shape, each applied to its own group of rows (kernels/linear.h's y = x W^T + b
// per group): the grouped GEMM of a rank's local experts (Megatron's --moe-grouped-gemm,
// model/grouped_mlp.h). The groups are padded to one row count, x [groups, rows, in] ->
// y [groups, rows, out], so that each product is one strided batched GEMM (kernels/gemm.h) when the
// layers' weights lie one constant stride apart in memory, as a ParameterSet lays out experts declared
// one after another; otherwise the groups run one after another (the same sums). Dispatched on the
// tensors' device (kernels/device_dispatch.h; the CPU code is kernels/cpu/grouped_linear.h).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tessera::kernels {

// w[g] [out, in] and b[g] [out] (b empty: no bias) for each group g; y overwritten. input_type and
// x_rounded as linear_forward's (the weights are read as fp32 and rounded by the GEMM).
void grouped_linear_forward(const Tensor& x, const std::vector<Tensor>& w, const std::vector<Tensor>& b,
                            const Tensor& y, DType input_type = DType::F32, bool x_rounded = false);

// dy [groups, rows, out]. dx [groups, rows, in] is overwritten; dw[g] and db[g] are accumulated into.
// dx undefined, dw or db empty: not wanted. dy_rounded: dy already holds values of input_type.
void grouped_linear_backward(const Tensor& dy, const Tensor& x, const std::vector<Tensor>& w, const Tensor& dx,
                             const std::vector<Tensor>& dw, const std::vector<Tensor>& db,
                             DType input_type = DType::F32, bool x_rounded = false, bool dy_rounded = false);

// The consecutive row groups of x [sum counts, d] (counts[g] rows each, group 0 first) as
// [groups, rows, d], each padded with zero rows to `rows` (at least every count).
Tensor pad_row_groups(const Tensor& x, const std::vector<int64_t>& counts, int64_t rows);
// The inverse: the first counts[g] rows of each group of padded [groups, rows, d] into out [sum counts, d].
void unpad_row_groups(const Tensor& padded, const std::vector<int64_t>& counts, const Tensor& out);

}  // namespace tessera::kernels
