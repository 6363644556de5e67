// Tensor: a shape, an element type, a device and a view into reference-counted storage from the
// device's allocator (core/allocator.h; 64-byte aligned host memory on the CPU). Tensors are always contiguous (row-major); views are reshapes and ranges along the
// first dimension, which is all the explicit forward/backward code needs and keeps kernels simple.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/dtype.h"

namespace tessera {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
int64_t shape_numel(const Shape& shape);

// The bytes held by all tensor storages of the process now (on every device), and the most held at
// once since the last reset: Tessera's own allocator accounting for the memory report (more precise
// than RSS).
struct TensorMemory {
  static int64_t live_bytes();
  static int64_t peak_bytes();
  static void reset_peak();  // the peak restarts from the live bytes
};

class Storage {
 public:
  Storage(size_t bytes, Device device);
  // From `allocator` rather than the device's registered one (Tensor::empty_from).
  Storage(size_t bytes, Device device, Allocator& allocator);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // The allocator that made it: its set_zero, fill_f32 and copy_bytes work on this memory.
  Allocator& allocator() const { return *allocator_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Allocator* allocator_;  // the one that allocated data_, which gets it back
};

// The device a tensor is made on when its maker names none: the CPU, or the device of the innermost
// DefaultDeviceScope of this thread (as torch.set_default_device, but scoped). The model names no
// device (it reaches memory only through kernels), so a model built and run inside
// `DefaultDeviceScope scope(Device{DeviceType::CUDA, 0})` has its parameters and activations on the GPU.
// Code that reads memory on the host names Device::cpu() for what it reads.
Device default_device();
class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(Device device);
  ~DefaultDeviceScope();
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  Device previous_;
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = default_device());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = default_device());
  // Uninitialised, on `device` but from `allocator` instead of the device's registered one: host memory
  // that a device backend pins for fast transfers is a cpu tensor of its own allocator
  // (comm/staged_process_group.h). The allocator must outlive the tensor's storage.
  static Tensor empty_from(Allocator& allocator, const Shape& shape, DType dtype, Device device);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const;  // negative i counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }

  // The memory itself, on the tensor's device: for kernels (kernels/, core/), which pass it to that
  // device's code. Typed pointers check the element type, so a bf16 tensor is never read as fp32 by mistake.
  void* raw() const;
  float* f32() const;
  uint16_t* bf16() const;
  int32_t* i32() const;
  int64_t* i64() const;

  // The same, for code that reads or writes the elements on the host (the layers above the model:
  // scripts/check_device_seam.py keeps them to these): an Error naming the device unless the tensor is
  // on the CPU, so a GPU's memory is never read by mistake; copy it first (kernels::to_device).
  void* host_raw() const;
  float* host_f32() const;
  uint16_t* host_bf16() const;
  int32_t* host_i32() const;
  int64_t* host_i64() const;

  // Same elements, new shape (numel must match).
  Tensor view(const Shape& shape) const;
  // Rows [start, start + length) along dimension 0.
  Tensor narrow(int64_t start, int64_t length) const;
  // Elements [start, start + length) of the flattened tensor, as a 1-D view.
  Tensor flat_range(int64_t start, int64_t length) const;

  void zero_() const;
  void fill_(float value) const;  // fp32 only
  void copy_from(const Tensor& src) const;  // same shape and dtype
  Tensor clone() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

// Throws "<what>: shape mismatch, <a> vs <b>" unless the shapes are equal.
void check_same_shape(const Tensor& a, const Tensor& b, const char* what);
void check_shape(const Tensor& t, const Shape& expected, const char* what);

}  // namespace tessera
