#include "core/tensor.h"

#include <atomic>
#include <cstring>

namespace tessera {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
  }
  return "?";
}

std::string Device::str() const {
  return type == DeviceType::CPU ? std::string("cpu") : str_cat("cuda:", index);
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
std::atomic<int64_t> live_tensor_bytes{0}, peak_tensor_bytes{0};
}  // namespace

int64_t TensorMemory::live_bytes() { return live_tensor_bytes.load(); }
int64_t TensorMemory::peak_bytes() { return peak_tensor_bytes.load(); }
void TensorMemory::reset_peak() { peak_tensor_bytes.store(live_tensor_bytes.load()); }

namespace {
thread_local Device t_default_device = Device::cpu();
}  // namespace

Device default_device() { return t_default_device; }

DefaultDeviceScope::DefaultDeviceScope(Device device) : previous_(t_default_device) { t_default_device = device; }

DefaultDeviceScope::~DefaultDeviceScope() { t_default_device = previous_; }

Storage::Storage(size_t bytes, Device device) : Storage(bytes, device, allocator_for(device)) {}

Storage::Storage(size_t bytes, Device device, Allocator& allocator)
    : bytes_(bytes), device_(device), allocator_(&allocator) {
  constexpr size_t kAlign = 64;  // a cache line, and an AVX-512 vector
  data_ = allocator_->allocate(bytes, kAlign);
  int64_t live = live_tensor_bytes += static_cast<int64_t>(bytes);
  for (int64_t peak = peak_tensor_bytes.load(); live > peak && !peak_tensor_bytes.compare_exchange_weak(peak, live);) {
  }
}

Storage::~Storage() {
  allocator_->deallocate(data_, bytes_);
  live_tensor_bytes -= static_cast<int64_t>(bytes_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) TESSERA_CHECK(d >= 0, "Tensor::empty: negative dimension in ", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

int64_t Tensor::dim(int64_t i) const {
  int64_t n = ndim();
  if (i < 0) i += n;
  TESSERA_CHECK(i >= 0 && i < n, "Tensor::dim: index ", i, " out of range for shape ", shape_str(shape_));
  return shape_[i];
}

void* Tensor::raw() const {
  TESSERA_CHECK(defined(), "use of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

#define TESSERA_TYPED_ACCESSOR(name, ctype, dt)                                                   \
  ctype* Tensor::name() const {                                                                  \
    TESSERA_CHECK(dtype_ == dt, "tensor of dtype ", dtype_name(dtype_), " read as ", dtype_name(dt)); \
    return static_cast<ctype*>(raw());                                                           \
  }
TESSERA_TYPED_ACCESSOR(f32, float, DType::F32)
TESSERA_TYPED_ACCESSOR(bf16, uint16_t, DType::BF16)
TESSERA_TYPED_ACCESSOR(i32, int32_t, DType::I32)
TESSERA_TYPED_ACCESSOR(i64, int64_t, DType::I64)
#undef TESSERA_TYPED_ACCESSOR

namespace {
// An Error naming `accessor`, the tensor and its device unless the tensor is on the CPU.
void check_on_host(const Tensor& t, const char* accessor) {
  TESSERA_CHECK(t.device().type == DeviceType::CPU, accessor, "() of a ", shape_str(t.shape()), " ",
                dtype_name(t.dtype()), " tensor on ", t.device().str(),
                ", which is not host memory: copy it to the host first (kernels::to_device(t, Device::cpu()),",
                " kernels/tensor_ops.h)");
}
}  // namespace

void* Tensor::host_raw() const {
  check_on_host(*this, "host_raw");
  return raw();
}

#define TESSERA_HOST_ACCESSOR(name, ctype)  \
  ctype* Tensor::host_##name() const {     \
    check_on_host(*this, "host_" #name);   \
    return name(); /* checks the dtype */  \
  }
TESSERA_HOST_ACCESSOR(f32, float)
TESSERA_HOST_ACCESSOR(bf16, uint16_t)
TESSERA_HOST_ACCESSOR(i32, int32_t)
TESSERA_HOST_ACCESSOR(i64, int64_t)
#undef TESSERA_HOST_ACCESSOR

Tensor Tensor::view(const Shape& shape) const {
  TESSERA_CHECK(shape_numel(shape) == numel(), "view: cannot view ", shape_str(shape_), " as ",
                shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  TESSERA_CHECK(ndim() >= 1, "narrow: tensor has no dimensions");
  TESSERA_CHECK(start >= 0 && length >= 0 && start + length <= shape_[0], "narrow: rows [", start, ", ",
                start + length, ") out of range for shape ", shape_str(shape_));
  Tensor t = *this;
  int64_t row = numel() / (shape_[0] == 0 ? 1 : shape_[0]);
  t.offset_bytes_ += static_cast<size_t>(start * row) * dtype_size(dtype_);
  t.shape_[0] = length;
  return t;
}

Tensor Tensor::flat_range(int64_t start, int64_t length) const {
  TESSERA_CHECK(start >= 0 && length >= 0 && start + length <= numel(), "flat_range: [", start, ", ",
                start + length, ") out of range for ", numel(), " elements");
  Tensor t = *this;
  t.offset_bytes_ += static_cast<size_t>(start) * dtype_size(dtype_);
  t.shape_ = {length};
  return t;
}

// Through the storage's allocator, which knows how to reach its device's memory (core/allocator.h).
void Tensor::zero_() const {
  void* p = raw();  // checks that the tensor is defined
  storage_->allocator().set_zero(p, nbytes());
}

void Tensor::fill_(float value) const {
  float* p = f32();
  storage_->allocator().fill_f32(p, value, static_cast<size_t>(numel()));
}

void Tensor::copy_from(const Tensor& src) const {
  check_same_shape(*this, src, "copy_from");
  TESSERA_CHECK(dtype_ == src.dtype_, "copy_from: dtype mismatch, ", dtype_name(dtype_), " vs ",
                dtype_name(src.dtype_));
  TESSERA_CHECK(device() == src.device(), "copy_from: ", src.device().str(), " to ", device().str(),
                " is a transfer (kernels::transfer), not a copy");
  void* dst = raw();
  storage_->allocator().copy_bytes(dst, src.raw(), nbytes());
}

Tensor Tensor::empty_from(Allocator& allocator, const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) TESSERA_CHECK(d >= 0, "Tensor::empty_from: negative dimension in ", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device, allocator);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  TESSERA_CHECK(a.shape() == b.shape(), what, ": shape mismatch, ", shape_str(a.shape()), " vs ",
                shape_str(b.shape()));
}

void check_shape(const Tensor& t, const Shape& expected, const char* what) {
  TESSERA_CHECK(t.shape() == expected, what, ": expected shape ", shape_str(expected), ", got ",
                shape_str(t.shape()));
}

}  // namespace tessera
