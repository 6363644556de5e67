#include "ckpt/torch_save.h"

#include <vector>

#include "ckpt/zip_writer.h"
#include "core/check.h"
#include "kernels/precision.h"

namespace tessera::ckpt {

std::string torch_storage_class(DType stored) {
  switch (stored) {
    case DType::F32: return "torch\nFloatStorage";
    case DType::BF16: return "torch\nBFloat16Storage";
    case DType::F16: return "torch\nHalfStorage";
    case DType::I32: return "torch\nIntStorage";
    case DType::I64: return "torch\nLongStorage";
    default: break;
  }
  throw Error(str_cat("torch.save: no torch storage class for ", dtype_name(stored)));
}

PickleOut torch_dtype_value(DType d) {
  switch (d) {
    case DType::F32: return PickleOut::global("torch", "float32");
    case DType::BF16: return PickleOut::global("torch", "bfloat16");
    case DType::F16: return PickleOut::global("torch", "float16");
    default: break;
  }
  throw Error(str_cat("torch.save: no torch dtype for ", dtype_name(d)));
}

PickleOut TorchSaveWriter::tensor(const Tensor& t, DType stored) {
  TESSERA_CHECK(t.dtype() == stored || (t.dtype() == DType::F32 && (stored == DType::BF16 || stored == DType::F16)),
                "torch.save: a ", dtype_name(t.dtype()), " tensor cannot be stored as ", dtype_name(stored));
  PickleOut out = rebuild(torch_storage_class(stored), t.shape());
  storages_.push_back({t, stored, {}});
  return out;
}

PickleOut TorchSaveWriter::byte_tensor(std::string bytes) {
  PickleOut out = rebuild("torch\nByteStorage", {static_cast<int64_t>(bytes.size())});
  storages_.push_back({Tensor(), DType::F32, std::move(bytes)});
  return out;
}

// The _rebuild_tensor_v2 call of the next storage (key: its index), contiguous.
PickleOut TorchSaveWriter::rebuild(const std::string& cls, const Shape& shape) {
  const std::string key = std::to_string(storages_.size());
  std::vector<PickleOut> size, stride;
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    stride.insert(stride.begin(), PickleOut::int_of(step));
    step *= shape[i];
  }
  for (int64_t d : shape) size.push_back(PickleOut::int_of(d));
  const size_t newline = cls.find('\n');
  PickleOut storage = PickleOut::persistent_id(
      {PickleOut::str("storage"), PickleOut::global(cls.substr(0, newline), cls.substr(newline + 1)), PickleOut::str(key),
       PickleOut::str("cpu"), PickleOut::int_of(step)});
  return PickleOut::call("torch._utils", "_rebuild_tensor_v2",
                         {std::move(storage), PickleOut::int_of(0), PickleOut::tuple(std::move(size)),
                          PickleOut::tuple(std::move(stride)), PickleOut::boolean_of(false),
                          PickleOut::dict(PickleOut::Kind::OrderedDict)});
}

void TorchSaveWriter::write(const std::string& path, const PickleOut& root) {
  ZipWriter zip(path);
  write_to(zip, root);
}

std::string TorchSaveWriter::bytes(const PickleOut& root) {
  std::string out;
  ZipWriter zip(&out);
  write_to(zip, root);
  return out;
}

void TorchSaveWriter::write_to(ZipWriter& zip, const PickleOut& root) {
  // torch.load takes the archive's name from its first entry; PyTorch 2.x writes "archive".
  zip.add("archive/data.pkl", write_pickle(root));
  zip.add("archive/byteorder", std::string("little"));
  std::vector<uint16_t> half;
  for (size_t i = 0; i < storages_.size(); ++i) {
    const Storage& s = storages_[i];
    const std::string name = "archive/data/" + std::to_string(i);
    if (!s.tensor.defined()) {
      zip.add(name, s.bytes.data(), s.bytes.size());
      continue;
    }
    if (s.tensor.dtype() == s.stored) {
      zip.add(name, s.tensor.host_raw(), s.tensor.nbytes());
      continue;
    }
    // fp32 to bf16 (rounded to nearest even, as torch's .bfloat16()) or fp16, one tensor at a time.
    half.resize(static_cast<size_t>(s.tensor.numel()));
    const float* src = s.tensor.host_f32();
    for (int64_t j = 0; j < s.tensor.numel(); ++j)
      half[j] = s.stored == DType::BF16 ? fp32_to_bf16(src[j]) : kernels::fp32_to_fp16(src[j]);
    zip.add(name, half.data(), half.size() * sizeof(uint16_t));
  }
  zip.add("archive/version", std::string("3\n"));
  zip.commit();
}

}  // namespace tessera::ckpt
