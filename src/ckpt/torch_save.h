// Writing a torch.save file (the zip format of PyTorch >= 1.6; the inverse of torch_file.h) from a
// pickled value tree whose tensors are Tessera tensors, so that torch.load (PyTorch 1.13 and 2.x) reads
// it: `archive/data.pkl` (pickle_writer.h), `archive/byteorder` ("little", which newer PyTorch reads and
// older ignores), one `archive/data/<key>` entry of raw little-endian elements per tensor, and
// `archive/version` ("3", the file format PyTorch 1.13 and later write). Each tensor is a
// torch._utils._rebuild_tensor_v2(storage, 0, size, contiguous stride, False, OrderedDict()) call whose
// storage is the persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel), as torch.save
// writes it. The storages are written one after another as the archive is streamed to disk; the
// tensors are converted to the stored element type one at a time.
#pragma once

#include <string>
#include <vector>

#include "ckpt/pickle_writer.h"
#include "core/tensor.h"

namespace tessera::ckpt {

class ZipWriter;

class TorchSaveWriter {
 public:
  // A tensor in the value tree, stored as `stored` (F32, BF16 or F16, from an F32 tensor; or the
  // tensor's own type). The tensor is kept (shared, not copied) until write().
  PickleOut tensor(const Tensor& t, DType stored);
  // A 1-d torch.uint8 tensor of these bytes (a ByteStorage; Tessera has no uint8 tensors), as the RNG
  // states torch.get_rng_state() gives.
  PickleOut byte_tensor(std::string bytes);
  // Writes `root` and the storages of the tensors made by tensor() to `path`, atomically.
  void write(const std::string& path, const PickleOut& root);
  // The same archive's bytes (what torch.save writes to a BytesIO: a DCP data file's item).
  std::string bytes(const PickleOut& root);

 private:
  struct Storage {
    Tensor tensor;
    DType stored;
    std::string bytes;  // a ByteStorage's (tensor undefined)
  };
  PickleOut rebuild(const std::string& storage_class, const Shape& shape);
  void write_to(ZipWriter& zip, const PickleOut& root);
  std::vector<Storage> storages_;
};

// "torch\nBFloat16Storage" (module and name for GLOBAL) for an element type; an Error for others.
std::string torch_storage_class(DType stored);
// torch.float32 / torch.bfloat16 / torch.float16 as a pickled value (Megatron's args.params_dtype).
PickleOut torch_dtype_value(DType d);

}  // namespace tessera::ckpt
