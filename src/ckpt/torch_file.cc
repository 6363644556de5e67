#include "ckpt/torch_file.h"

#include <cstring>
#include <unordered_map>

#include "ckpt/zip_reader.h"
#include "core/check.h"

namespace tessera::ckpt {

using PK = PyValue::Kind;
using SK = StateNode::Kind;

const StateNode* StateNode::find(std::string_view key) const {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (it->key == key) return &it->value;
  return nullptr;
}

const char* state_kind_name(SK kind) {
  static const char* const names[] = {"None", "bool",  "int",  "float",  "str",   "bytes",
                                      "list", "tuple", "dict", "tensor", "object"};
  return names[static_cast<int>(kind)];
}

namespace {

// Checkpoints nest a handful of levels; a deeper tree is malformed (or a cycle made with the memo).
constexpr int kMaxDepth = 64;
// The storage marker the persistent-id callback leaves in the tree: a class path no GLOBAL can spell,
// as every path a pickle makes has a dot.
constexpr std::string_view kStorageMarker = "<storage>";
constexpr int64_t kMaxRepeatedElements = int64_t{1} << 24;

DType tessera_dtype(TorchScalar s) {
  switch (s) {
    case TorchScalar::F32: case TorchScalar::F64: return DType::F32;
    case TorchScalar::BF16: return DType::BF16;
    case TorchScalar::F16: return DType::F16;
    case TorchScalar::I64: case TorchScalar::U32: return DType::I64;
    default: return DType::I32;
  }
}

// Converts n contiguous elements of type `s` (little-endian, as torch.save writes on every platform
// Megatron runs on) into dst's memory, of tessera_dtype(s).
void convert(const char* src, TorchScalar s, int64_t n, const Tensor& dst) {
  const DType dt = tessera_dtype(s);
  if (dtype_size(dt) == torch_scalar_size(s)) {  // same representation
    std::memcpy(dst.host_raw(), src, static_cast<size_t>(n) * dtype_size(dt));
    return;
  }
  if (s == TorchScalar::U32) {
    int64_t* out = dst.host_i64();
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      out[i] = v;
    }
    return;
  }
  if (s == TorchScalar::F64) {
    float* out = dst.host_f32();
    for (int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      out[i] = static_cast<float>(v);
    }
    return;
  }
  int32_t* out = dst.host_i32();
  for (int64_t i = 0; i < n; ++i) {
    if (s == TorchScalar::I16) {
      int16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      out[i] = v;
    } else if (s == TorchScalar::I8) {
      out[i] = static_cast<int8_t>(src[i]);
    } else {  // U8, Bool
      out[i] = static_cast<unsigned char>(src[i]);
    }
  }
}

// The elements of a strided view over `span` (whose element 0 is the view's first), in row-major
// order: one copy when the view is contiguous, else an odometer over the indices.
std::vector<char> gather(const char* span, const Shape& sizes, const Shape& strides, size_t es, int64_t numel) {
  std::vector<char> dense(static_cast<size_t>(numel) * es);
  bool contiguous = true;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1, expect = 1; i >= 0; expect *= sizes[i], --i)
    if (sizes[i] != 1 && strides[i] != expect) contiguous = false;
  if (contiguous) {
    std::memcpy(dense.data(), span, dense.size());
    return dense;
  }
  std::vector<int64_t> idx(sizes.size(), 0);
  int64_t src = 0;
  for (int64_t k = 0; k < numel; ++k) {
    std::memcpy(dense.data() + k * es, span + src * es, es);
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
      src += strides[d];
      if (++idx[d] < sizes[d]) break;
      src -= strides[d] * sizes[d];
      idx[d] = 0;
    }
  }
  return dense;
}

// numpy's type codes ("f4", "u4", ...) of the arrays and scalars a checkpoint holds.
TorchScalar numpy_type(const std::string& code) {
  static const std::pair<const char*, TorchScalar> codes[] = {
      {"f4", TorchScalar::F32}, {"f8", TorchScalar::F64}, {"f2", TorchScalar::F16}, {"i8", TorchScalar::I64},
      {"i4", TorchScalar::I32}, {"i2", TorchScalar::I16}, {"i1", TorchScalar::I8},  {"u1", TorchScalar::U8},
      {"b1", TorchScalar::Bool}, {"u4", TorchScalar::U32}};
  for (const auto& [c, t] : codes)
    if (code == c) return t;
  return TorchScalar::Unknown;
}

class Loader {
 public:
  explicit Loader(const std::string& path) : path_(path), zip_(ZipReader::open(path)) {}
  Loader(const std::string& file, const std::string& label, uint64_t base, uint64_t length)
      : path_(label), zip_(ZipReader::open_segment(file, label, base, length)) {}
  StateNode load();

 private:
  template <typename... Args>
  [[noreturn]] void fail(const std::string& where, const Args&... args) const {
    throw Error(str_cat(path_, ": ", where.empty() ? std::string("the top level") : where, ": ", args...));
  }
  static std::string child(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
  int64_t as_int(const PyValue* v, const std::string& where, const char* what) const {
    if (!v->is(PK::Int)) fail(where, what, " is a ", py_kind_name(v->kind), ", not an int");
    return v->integer;
  }
  Shape int_tuple(const PyValue* v, const std::string& where, const char* what) const;

  PyValue* storage_marker(Pickle& pickle, const PyValue& pid);
  StateNode convert_value(const PyValue* v, const std::string& where, int depth);
  StateNode convert_object(const PyValue* v, const std::string& where, int depth);
  StateNode tensor(const PyValue* v, const std::vector<PyValue*>& args, KnownClass kind, const std::string& where);
  StateNode numpy_scalar(const PyValue* v, const std::string& where);
  StateNode numpy_array(const PyValue* v, const std::string& where);

  std::string path_;
  ZipReader zip_;
  std::string prefix_;  // "archive/": the directory data.pkl is in
  std::string pkl_name_ = "data.pkl";  // its entry, which errors about the pickle itself name
  std::unordered_map<const PyValue*, StateNode> tensors_;  // each tensor object read once
  // Nodes made so far, and the most allowed: a value the memo places in several spots is copied to
  // each, so a pickle of lists of lists of one list would otherwise grow exponentially.
  size_t nodes_ = 0, max_nodes_ = 0;
};

PyValue* Loader::storage_marker(Pickle& pickle, const PyValue& pid) {
  // ('storage', storage_type, key, location, numel); numel counts storage_type's elements.
  const std::string where = "persistent id " + py_repr(pid);
  if (!pid.is(PK::Tuple) || pid.items.size() != 5 || !pid.items[0]->is(PK::String) || pid.items[0]->text != "storage")
    fail(pkl_name_, where, " is not ('storage', type, key, location, numel)");
  const PyValue* type = pid.items[1];
  const ClassInfo info = type->is(PK::Global) ? classify(type->text) : ClassInfo{};
  TorchScalar scalar = info.scalar;
  if (info.known == KnownClass::UntypedStorage) scalar = TorchScalar::U8;  // counted in bytes
  if (info.known != KnownClass::Storage && info.known != KnownClass::UntypedStorage)
    fail(pkl_name_, where, ": ", py_repr(*type), " is not a storage class");
  if (!pid.items[2]->is(PK::String)) fail(pkl_name_, where, ": the storage key is not a string");
  const int64_t numel = as_int(pid.items[4], pkl_name_, "the storage's element count");
  if (numel < 0) fail(pkl_name_, where, ": negative element count");
  PyValue* m = pickle.make(PK::Object);
  m->text = kStorageMarker;
  m->items = {pid.items[2], pid.items[4]};
  m->integer = static_cast<int64_t>(scalar);
  return m;
}

Shape Loader::int_tuple(const PyValue* v, const std::string& where, const char* what) const {
  // torch.Size pickles as a plain tuple in _rebuild_tensor_v2, as torch.Size((...)) elsewhere.
  if (v->is(PK::Object) && classify(v->text).known == KnownClass::TorchSize && v->items.size() == 1) v = v->items[0];
  if (!v->is(PK::Tuple) && !v->is(PK::List)) fail(where, what, " is a ", py_kind_name(v->kind), ", not a tuple");
  if (v->items.size() > 64) fail(where, what, " has ", v->items.size(), " dimensions");
  Shape out;
  for (const PyValue* x : v->items) {
    out.push_back(as_int(x, where, what));
    if (out.back() < 0) fail(where, what, " ", py_repr(*v), " has a negative entry");
  }
  return out;
}

StateNode Loader::tensor(const PyValue* v, const std::vector<PyValue*>& args, KnownClass kind, const std::string& where) {
  if (auto it = tensors_.find(v); it != tensors_.end()) return it->second;
  if (args.size() < 4 || (kind == KnownClass::RebuildTensorV3 && args.size() < 7))
    fail(where, "tensor rebuilt with ", args.size(), " arguments, too few");
  const PyValue* st = args[0];
  if (!st->is(PK::Object) || st->text != kStorageMarker)
    fail(where, "tensor's storage is ", py_repr(*st), ", not a storage of the archive");
  TorchScalar scalar = static_cast<TorchScalar>(st->integer);
  const std::string& key = st->items[0]->text;
  int64_t storage_numel = st->items[1]->integer;
  if (kind == KnownClass::RebuildTensorV3) {  // an untyped storage (counted in bytes): the dtype is an argument
    const ClassInfo d = args[6]->is(PK::Global) ? classify(args[6]->text) : ClassInfo{};
    if (d.known != KnownClass::TorchDtype) fail(where, "tensor dtype ", py_repr(*args[6]), " is not a torch dtype");
    const auto size = static_cast<int64_t>(torch_scalar_size(d.scalar));
    if (scalar != TorchScalar::U8 || storage_numel % size != 0)
      fail(where, "_rebuild_tensor_v3 of a typed or misaligned storage");
    scalar = d.scalar;
    storage_numel /= size;
  }
  if (scalar == TorchScalar::Unknown) fail(where, "storage '", key, "' has an unknown element type");
  const size_t es = torch_scalar_size(scalar);
  const int64_t offset = as_int(args[1], where, "storage offset");
  const Shape sizes = int_tuple(args[2], where, "size");
  const Shape strides = int_tuple(args[3], where, "stride");
  if (offset < 0) fail(where, "negative storage offset ", offset);
  if (sizes.size() != strides.size())
    fail(where, "size ", shape_str(sizes), " and stride ", shape_str(strides), " differ in rank");

  // The highest element the view touches, with overflow checked: a hostile size must fail here,
  // not allocate.
  int64_t numel = 1, last = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (__builtin_mul_overflow(numel, sizes[i], &numel)) fail(where, "size ", shape_str(sizes), " overflows");
    int64_t reach;
    if (sizes[i] > 0 && (__builtin_mul_overflow(sizes[i] - 1, strides[i], &reach) || __builtin_add_overflow(last, reach, &last)))
      fail(where, "stride ", shape_str(strides), " overflows");
  }
  const std::string entry_name = prefix_ + "data/" + key;
  const ZipEntry* entry = zip_.find(entry_name);
  if (!entry) fail(where, "tensor's storage '", entry_name, "' is not in the archive");
  if (storage_numel > static_cast<int64_t>(entry->size / es))
    fail(where, "storage '", entry_name, "' is ", entry->size, " bytes, too short for its ", storage_numel, " ",
         torch_scalar_name(scalar), " elements");
  // A stride of 0 (an expanded view) repeats elements, so the copy can be far larger than the file;
  // checkpoints hold none of note, so a large one is refused rather than allocated.
  if (numel > storage_numel && numel > kMaxRepeatedElements)
    fail(where, "view of size ", shape_str(sizes), " stride ", shape_str(strides), " repeats the ", storage_numel,
         " elements of storage '", entry_name, "' into ", numel, " (over ", kMaxRepeatedElements, ")");
  if (numel > 0 && last >= storage_numel)
    fail(where, "storage '", entry_name, "' is too short for the view: size ", shape_str(sizes), " stride ",
         shape_str(strides), " offset ", offset, " reaches element ", last, " of ", storage_numel);

  StateNode n;
  n.kind = SK::Tensor;
  n.stored = scalar;
  n.tensor = Tensor::empty(sizes, tessera_dtype(scalar), Device::cpu());
  if (numel > 0) {
    // Read the span the view covers, then gather it in row-major order (one copy when contiguous).
    std::vector<char> span(static_cast<size_t>(last - offset + 1) * es);
    zip_.read(*entry, static_cast<uint64_t>(offset) * es, span.data(), span.size());
    const std::vector<char> dense = gather(span.data(), sizes, strides, es, numel);
    convert(dense.data(), scalar, numel, n.tensor);
  }
  return tensors_[v] = n;
}

StateNode Loader::numpy_scalar(const PyValue* v, const std::string& where) {
  // numpy.core.multiarray.scalar(numpy.dtype('<code>', ...), raw bytes), as np.float64(3.0) pickles.
  if (v->items.size() != 2 || !v->items[0]->is(PK::Object) || v->items[0]->items.empty() ||
      !v->items[0]->items[0]->is(PK::String) || !v->items[1]->is(PK::Bytes))
    fail(where, "numpy scalar ", py_repr(*v), " is malformed");
  const std::string& code = v->items[0]->items[0]->text;
  const std::string& raw = v->items[1]->text;
  StateNode n;
  auto load = [&](auto value) {
    if (raw.size() != sizeof(value)) fail(where, "numpy ", code, " scalar of ", raw.size(), " bytes");
    std::memcpy(&value, raw.data(), sizeof(value));
    return value;
  };
  if (code == "f8") { n.kind = SK::Float; n.real = load(double{}); }
  else if (code == "f4") { n.kind = SK::Float; n.real = load(float{}); }
  else if (code == "i8") { n.kind = SK::Int; n.integer = load(int64_t{}); }
  else if (code == "i4") { n.kind = SK::Int; n.integer = load(int32_t{}); }
  else if (code == "u4") { n.kind = SK::Int; n.integer = load(uint32_t{}); }
  else if (code == "b1") { n.kind = SK::Bool; n.boolean = load(uint8_t{}) != 0; }
  else fail(where, "numpy scalar of dtype '", code, "' is not read");
  return n;
}

StateNode Loader::numpy_array(const PyValue* v, const std::string& where) {
  // _reconstruct(ndarray, (0,), b'b') with the state (version, shape, dtype, fortran order, raw bytes).
  const PyValue* st = v->state;
  if (!st || !st->is(PK::Tuple) || st->items.size() != 5 || !st->items[2]->is(PK::Object) ||
      st->items[2]->items.empty() || !st->items[2]->items[0]->is(PK::String) || !st->items[4]->is(PK::Bytes))
    fail(where, "numpy array ", py_repr(*v), " is malformed (or of Python objects, which are not read)");
  const PyValue* dtype = st->items[2];
  const TorchScalar scalar = numpy_type(dtype->items[0]->text);
  if (scalar == TorchScalar::Unknown) fail(where, "numpy array of dtype '", dtype->items[0]->text, "' is not read");
  if (dtype->state && dtype->state->is(PK::Tuple) && dtype->state->items.size() > 1 &&
      dtype->state->items[1]->is(PK::String) && dtype->state->items[1]->text == ">")
    fail(where, "big-endian numpy array is not read");
  const Shape sizes = int_tuple(st->items[1], where, "numpy array shape");
  const size_t es = torch_scalar_size(scalar);
  int64_t numel = 1;
  for (int64_t d : sizes)
    if (__builtin_mul_overflow(numel, d, &numel)) fail(where, "numpy array shape ", shape_str(sizes), " overflows");
  const std::string& raw = st->items[4]->text;
  if (raw.size() / es != static_cast<uint64_t>(numel) || raw.size() % es != 0)
    fail(where, "numpy array of shape ", shape_str(sizes), " holds ", raw.size(), " bytes, not ", numel, " × ", es);
  // Fortran order: the first index varies fastest.
  Shape strides(sizes.size(), 1);
  const bool fortran = st->items[3]->is(PK::Bool) && st->items[3]->boolean;
  for (size_t i = 1; i < sizes.size(); ++i) {
    if (fortran) strides[i] = strides[i - 1] * sizes[i - 1];
    else strides[sizes.size() - 1 - i] = strides[sizes.size() - i] * sizes[sizes.size() - i];
  }
  StateNode n;
  n.kind = SK::Tensor;
  n.stored = scalar;
  n.tensor = Tensor::empty(sizes, tessera_dtype(scalar), Device::cpu());
  if (numel > 0) convert(gather(raw.data(), sizes, strides, es, numel).data(), scalar, numel, n.tensor);
  return n;
}

StateNode Loader::convert_object(const PyValue* v, const std::string& where, int depth) {
  const ClassInfo info = classify(v->text);
  switch (info.known) {
    case KnownClass::RebuildTensor:
    case KnownClass::RebuildTensorV2:
    case KnownClass::RebuildTensorV3:
      return tensor(v, v->items, info.known, where);
    case KnownClass::RebuildParameter:  // a Parameter is its tensor here
      if (v->items.empty()) fail(where, "_rebuild_parameter without a tensor");
      return convert_value(v->items[0], where, depth + 1);
    case KnownClass::RebuildFromTypeV2: {  // (func, type, args, state): a tensor subclass
      if (v->items.size() < 3 || !v->items[0]->is(PK::Global) || !v->items[2]->is(PK::Tuple))
        fail(where, "_rebuild_from_type_v2 ", py_repr(*v), " is malformed");
      const KnownClass inner = classify(v->items[0]->text).known;
      if (inner != KnownClass::RebuildTensor && inner != KnownClass::RebuildTensorV2 && inner != KnownClass::RebuildTensorV3)
        fail(where, "_rebuild_from_type_v2 of ", v->items[0]->text, " is not read");
      return tensor(v, v->items[2]->items, inner, where);
    }
    case KnownClass::NumpyScalar: return numpy_scalar(v, where);
    case KnownClass::NumpyReconstruct: return numpy_array(v, where);
    case KnownClass::TorchSize:
      if (v->items.size() == 1) return convert_value(v->items[0], where, depth + 1);
      break;
    default: break;
  }
  if (v->text == kStorageMarker) fail(where, "a bare storage outside a tensor is not read");
  // Anything else (argparse.Namespace, an enum, an unknown class) is kept as an inert record.
  StateNode n;
  n.kind = SK::Object;
  n.text = v->text;
  for (size_t i = 0; i < v->items.size(); ++i)
    n.items.push_back(convert_value(v->items[i], child(where, str_cat("arg", i)), depth + 1));
  std::vector<std::pair<PyValue*, PyValue*>> entries;
  if (v->state && v->state->is(PK::Dict)) entries = v->state->entries;
  entries.insert(entries.end(), v->entries.begin(), v->entries.end());
  for (const auto& [k, x] : entries) {
    std::string key = k->is(PK::String) ? k->text : py_repr(*k);
    StateNode value = convert_value(x, child(where, key), depth + 1);
    n.entries.push_back({std::move(key), std::move(value)});
  }
  if (v->state && !v->state->is(PK::Dict))
    n.entries.push_back({"__state__", convert_value(v->state, child(where, "__state__"), depth + 1)});
  return n;
}

StateNode Loader::convert_value(const PyValue* v, const std::string& where, int depth) {
  if (depth > kMaxDepth) fail(where, "nested deeper than ", kMaxDepth, " levels (a cycle?)");
  if (++nodes_ > max_nodes_) fail(where, "the pickle repeats shared values into more than ", max_nodes_, " nodes");
  StateNode n;
  switch (v->kind) {
    case PK::None: break;
    case PK::Bool: n.kind = SK::Bool; n.boolean = v->boolean; break;
    case PK::Int: n.kind = SK::Int; n.integer = v->integer; break;
    case PK::Float: n.kind = SK::Float; n.real = v->real; break;
    case PK::String: n.kind = SK::String; n.text = v->text; break;
    case PK::Bytes: n.kind = SK::Bytes; n.text = v->text; break;
    case PK::Global: n.kind = SK::Object; n.text = v->text; break;  // a class or dtype named, not made
    case PK::List:
    case PK::Tuple:
      n.kind = v->is(PK::List) ? SK::List : SK::Tuple;
      for (size_t i = 0; i < v->items.size(); ++i)
        n.items.push_back(convert_value(v->items[i], child(where, std::to_string(i)), depth + 1));
      break;
    case PK::Dict:
      n.kind = SK::Dict;
      for (const auto& [k, x] : v->entries) {
        std::string key = k->is(PK::String) ? k->text : py_repr(*k);
        StateNode value = convert_value(x, child(where, key), depth + 1);
        n.entries.push_back({std::move(key), std::move(value)});
      }
      break;
    case PK::Object: return convert_object(v, where, depth);
  }
  return n;
}

StateNode Loader::load() {
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& e : zip_.entries()) {
    const size_t slash = e.name.rfind('/');
    if (e.name.substr(slash == std::string::npos ? 0 : slash + 1) == "data.pkl" &&
        e.name.find('/') == slash) {  // at the top or one directory down
      pkl = &e;
      prefix_ = e.name.substr(0, slash == std::string::npos ? 0 : slash + 1);
      break;
    }
  }
  if (!pkl) fail(pkl_name_, "not a torch.save archive: no data.pkl entry");
  if (const ZipEntry* order = zip_.find(prefix_ + "byteorder")) {
    const std::string bo = zip_.read_all(zip_.entry(order->name), 16);
    if (bo != "little") fail(order->name, "byte order '", bo, "' (only little-endian storages are read)");
  }
  pkl_name_ = pkl->name;
  const std::string bytes = zip_.read_all(zip_.entry(pkl->name));
  Pickle pickle = parse_pickle(bytes, path_ + ": " + pkl->name,
                               [this](Pickle& p, const PyValue& pid) { return storage_marker(p, pid); });
  max_nodes_ = 4 * pickle.value_count() + 4096;
  return convert_value(&pickle.root(), "", 0);
}

}  // namespace

StateNode load_torch_file(const std::string& path) { return Loader(path).load(); }

DType torch_tensor_dtype(TorchScalar s) { return tessera_dtype(s); }

Tensor torch_bytes_to_tensor(const char* data, TorchScalar s, const Shape& shape) {
  Tensor t = Tensor::empty(shape, tessera_dtype(s), Device::cpu());
  if (t.numel() > 0) convert(data, s, t.numel(), t);
  return t;
}

StateNode load_torch_segment(const std::string& file, const std::string& label, uint64_t base, uint64_t length) {
  return Loader(file, label, base, length).load();
}

}  // namespace tessera::ckpt
