// Element types and devices. bf16 is a storage type: values are converted to fp32 for arithmetic.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/host_device.h"

namespace tessera {

enum class DType : uint8_t { F32, BF16, F16, I32, I64 };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);  // "fp32", "bf16", ...

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; 0 on CPU.
  static Device cpu() { return {}; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

// Round-to-nearest-even fp32 -> bf16, as in PyTorch; NaN stays NaN. Host and device (the CUDA
// conversions and rounding kernels call these, so both give the same bits).
TESSERA_HOST_DEVICE inline uint16_t fp32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

TESSERA_HOST_DEVICE inline float bf16_to_fp32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

}  // namespace tessera
