// Whole-tensor operations that optimizers and the trainer need between kernels, dispatched on the
// tensors' device (kernels/device_dispatch.h): a scalar handed to a collective and read back, and
// copies between tensors. On a GPU these are the host-device transfers and device copies, so the
// layers above never read or write tensor memory themselves.
#pragma once

#include "core/tensor.h"

namespace tessera::kernels {

// A one-element fp32 tensor on `device` holding `value` (rounded to fp32), e.g. for an all-reduce.
Tensor scalar_tensor(double value, Device device = Device::cpu());
// The value of a one-element fp32 tensor, on the host.
double scalar_value(const Tensor& t);
// dst = src elementwise: the same dtype and number of elements (shapes may differ, as for flat views).
void copy(const Tensor& dst, const Tensor& src);

}  // namespace tessera::kernels
