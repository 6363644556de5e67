// Whole-tensor operations that the model, the optimizers and the trainer need between kernels,
// dispatched on the tensors' device (kernels/device_dispatch.h): a scalar handed to a collective and
// read back, host values (token ids) brought in, and copies between tensors. On a GPU these are the
// host-device transfers and device copies, so the layers above never read or write tensor memory.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera::kernels {

// A one-element fp32 tensor on `device` holding `value` (rounded to fp32), e.g. for an all-reduce.
Tensor scalar_tensor(double value, Device device = default_device());
// The value of a one-element fp32 tensor, on the host.
double scalar_value(const Tensor& t);
// A 1-D int32 tensor on `device` holding `values` (token ids a caller passes as a host vector).
Tensor from_host(const std::vector<int32_t>& values, Device device = default_device());
// dst = src elementwise: the same dtype and number of elements (shapes may differ, as for flat views).
void copy(const Tensor& dst, const Tensor& src);
// dst = src between devices (host to GPU, GPU to host) or within one: the same dtype and number of
// elements. How parameters, batches and checkpoints move between the host and a GPU.
void transfer(const Tensor& dst, const Tensor& src);
// t on `device`: t itself when it is there already (as PyTorch's Tensor.to), else a new copy.
Tensor to_device(const Tensor& t, Device device);

}  // namespace tessera::kernels
