// A pickle virtual machine for what torch.save (data.pkl) and PyTorch DCP (.metadata) write: protocol 2
// and later (and the few older opcodes they still emit). It never imports or calls anything: a class
// reference (GLOBAL, STACK_GLOBAL) becomes a Global value naming "module.name", and applying one
// (REDUCE, NEWOBJ, BUILD) becomes an inert Object holding that path, its arguments and its state, so a
// hostile file can at worst make a large tree. The one exception is collections.OrderedDict, which
// becomes a plain (ordered) Dict so that the items torch.save adds with SETITEMS land in it.
// Interpreting objects (tensors, storages, numpy arrays) is for the caller, helped by classify().
//
// Values live in an arena owned by the Pickle and point at each other with raw pointers: the memo lets
// one value appear in several places, or contain itself, and an arena frees cycles that shared_ptr
// would leak. A consumer that recurses must bound its depth for the same reason.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::ckpt {

struct PyValue {
  enum class Kind : uint8_t { None, Bool, Int, Float, String, Bytes, List, Tuple, Dict, Global, Object };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;                                   // String, Bytes; Global, Object: "module.name"
  std::vector<PyValue*> items;                        // List, Tuple; Object: the arguments it was made with
  std::vector<std::pair<PyValue*, PyValue*>> entries;  // Dict (in insertion order); Object: SETITEM(S)
  PyValue* state = nullptr;                           // BUILD's argument (Object, or a Dict's attributes)

  bool is(Kind k) const { return kind == k; }
  // The Dict entry (or Object entry) whose key is the string `key`; nullptr if none.
  const PyValue* get(std::string_view key) const;
};

const char* py_kind_name(PyValue::Kind kind);
// A short Python-like rendering for error messages and dict keys that are not strings ("3", "(1, 2)").
std::string py_repr(const PyValue& v, int depth = 3);

// Element types of torch storages and numpy arrays (U32: numpy's, as its RNG state), including those
// Tessera's DType lacks.
enum class TorchScalar : uint8_t { F32, F64, F16, BF16, I64, I32, I16, I8, U8, Bool, U32, Unknown };
size_t torch_scalar_size(TorchScalar s);
const char* torch_scalar_name(TorchScalar s);  // "float32", "bfloat16", ...

// The classes a checkpoint reader gives meaning to, recognised by module path under the names both
// PyTorch 1.x and 2.x (and numpy 1.x and 2.x) write.
enum class KnownClass : uint8_t {
  Unknown,
  RebuildTensor,       // torch._utils._rebuild_tensor(storage, offset, size, stride)
  RebuildTensorV2,     // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, md])
  RebuildTensorV3,     // ... v3: as v2 with a dtype before the metadata (2.x, untyped storages)
  RebuildParameter,    // torch._utils._rebuild_parameter(tensor, requires_grad, hooks[, state])
  RebuildFromTypeV2,   // torch._tensor._rebuild_from_type_v2(func, type, args, state): subclasses
  Storage,             // torch.FloatStorage, torch.cuda.HalfStorage, ...: `scalar` says which
  UntypedStorage,      // torch.UntypedStorage, torch.storage.UntypedStorage (bytes)
  TypedStorage,        // torch.storage.TypedStorage (its dtype given separately)
  TorchDtype,          // torch.float32, torch.bfloat16, ...: `scalar` says which
  TorchSize,           // torch.Size(tuple)
  OrderedDict,         // collections.OrderedDict
  Namespace,           // argparse.Namespace
  NumpyReconstruct,    // numpy.core.multiarray._reconstruct (numpy._core in 2.x)
  NumpyNdarray,        // numpy.ndarray
  NumpyDtype,          // numpy.dtype
  NumpyScalar,         // numpy.core.multiarray.scalar
};
struct ClassInfo {
  KnownClass known = KnownClass::Unknown;
  TorchScalar scalar = TorchScalar::Unknown;
};
ClassInfo classify(std::string_view class_path);

class Pickle {
 public:
  Pickle();
  ~Pickle();
  Pickle(Pickle&&) noexcept;
  Pickle& operator=(Pickle&&) noexcept;

  const PyValue& root() const { return *root_; }
  // A new value owned by this pickle (for persistent-load callbacks and the machine itself).
  PyValue* make(PyValue::Kind kind);
  size_t value_count() const { return arena_.size(); }

 private:
  friend Pickle parse_pickle(std::string_view, const std::string&,
                             const std::function<PyValue*(Pickle&, const PyValue&)>&);
  std::vector<std::unique_ptr<PyValue>> arena_;
  PyValue* root_ = nullptr;
};

// Resolves a persistent id (BINPERSID's popped value, PERSID's string) to the value it stands for;
// it may throw an Error. torch.save's ids are ('storage', storage_type, key, location, numel).
using PersistentLoad = std::function<PyValue*(Pickle& pickle, const PyValue& pid)>;

// Runs the pickle to its STOP. `where` starts every error ("model_optim_rng.pt: archive/data.pkl"),
// which also gives the byte offset and opcode. A persistent id without `load` is an error.
Pickle parse_pickle(std::string_view bytes, const std::string& where, const PersistentLoad& load = nullptr);

}  // namespace tessera::ckpt
