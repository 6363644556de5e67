#include "ckpt/pickle_reader.h"

#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "core/check.h"

namespace tessera::ckpt {

using Kind = PyValue::Kind;

const PyValue* PyValue::get(std::string_view key) const {
  // From the end: a key set twice (which Python would overwrite) answers with its last value.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (it->first->kind == Kind::String && it->first->text == key) return it->second;
  return nullptr;
}

const char* py_kind_name(Kind kind) {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Global: return "class reference";
    case Kind::Object: return "object";
  }
  return "?";
}

std::string py_repr(const PyValue& v, int depth) {
  if (depth <= 0) return "...";
  switch (v.kind) {
    case Kind::None: return "None";
    case Kind::Bool: return v.boolean ? "True" : "False";
    case Kind::Int: return std::to_string(v.integer);
    case Kind::Float: return str_cat(v.real);
    case Kind::String: return str_cat("'", v.text.substr(0, 200), "'");
    case Kind::Bytes: return str_cat("<", v.text.size(), " bytes>");
    case Kind::Global: return v.text;
    case Kind::List:
    case Kind::Tuple:
    case Kind::Object: {
      std::string s = v.kind == Kind::List ? "[" : v.kind == Kind::Tuple ? "(" : v.text + "(";
      for (size_t i = 0; i < v.items.size() && i < 8; ++i) s += (i ? ", " : "") + py_repr(*v.items[i], depth - 1);
      if (v.items.size() > 8) s += ", ...";
      return s + (v.kind == Kind::List ? "]" : ")");
    }
    case Kind::Dict: return str_cat("{", v.entries.size(), " entries}");
  }
  return "?";
}

size_t torch_scalar_size(TorchScalar s) {
  switch (s) {
    case TorchScalar::F64: case TorchScalar::I64: return 8;
    case TorchScalar::F32: case TorchScalar::I32: case TorchScalar::U32: return 4;
    case TorchScalar::F16: case TorchScalar::BF16: case TorchScalar::I16: return 2;
    case TorchScalar::I8: case TorchScalar::U8: case TorchScalar::Bool: return 1;
    case TorchScalar::Unknown: return 0;
  }
  return 0;
}

const char* torch_scalar_name(TorchScalar s) {
  static const char* const names[] = {"float32", "float64", "float16", "bfloat16", "int64", "int32",
                                      "int16",   "int8",    "uint8",   "bool",     "uint32", "unknown"};
  return names[static_cast<int>(s)];
}

ClassInfo classify(std::string_view p) {
  using K = KnownClass;
  using S = TorchScalar;
  struct Named {
    std::string_view name;
    S scalar;
  };
  // Storage classes by element type (torch.FloatStorage, torch.cuda.FloatStorage) and the dtype objects.
  static const Named storages[] = {{"Float", S::F32}, {"Double", S::F64}, {"Half", S::F16},  {"BFloat16", S::BF16},
                                   {"Long", S::I64},  {"Int", S::I32},    {"Short", S::I16}, {"Char", S::I8},
                                   {"Byte", S::U8},   {"Bool", S::Bool}};
  static const Named dtypes[] = {{"float32", S::F32}, {"float", S::F32},  {"float64", S::F64}, {"double", S::F64},
                                 {"float16", S::F16}, {"half", S::F16},   {"bfloat16", S::BF16}, {"int64", S::I64},
                                 {"long", S::I64},    {"int32", S::I32},  {"int", S::I32},     {"int16", S::I16},
                                 {"short", S::I16},   {"int8", S::I8},    {"uint8", S::U8},    {"bool", S::Bool}};
  static const std::pair<std::string_view, K> exact[] = {
      {"torch._utils._rebuild_tensor", K::RebuildTensor},
      {"torch._utils._rebuild_tensor_v2", K::RebuildTensorV2},
      {"torch._utils._rebuild_tensor_v3", K::RebuildTensorV3},
      {"torch._utils._rebuild_parameter", K::RebuildParameter},
      {"torch._utils._rebuild_parameter_with_state", K::RebuildParameter},
      {"torch._tensor._rebuild_from_type_v2", K::RebuildFromTypeV2},
      {"torch.UntypedStorage", K::UntypedStorage},
      {"torch.storage.UntypedStorage", K::UntypedStorage},
      {"torch.storage._UntypedStorage", K::UntypedStorage},
      {"torch._UntypedStorage", K::UntypedStorage},
      {"torch.TypedStorage", K::TypedStorage},
      {"torch.storage.TypedStorage", K::TypedStorage},
      {"torch.storage._TypedStorage", K::TypedStorage},
      {"torch.Size", K::TorchSize},
      {"collections.OrderedDict", K::OrderedDict},
      {"argparse.Namespace", K::Namespace},
      {"numpy.core.multiarray._reconstruct", K::NumpyReconstruct},
      {"numpy._core.multiarray._reconstruct", K::NumpyReconstruct},
      {"numpy.ndarray", K::NumpyNdarray},
      {"numpy.dtype", K::NumpyDtype},
      {"numpy.core.multiarray.scalar", K::NumpyScalar},
      {"numpy._core.multiarray.scalar", K::NumpyScalar},
  };
  for (const auto& [name, known] : exact)
    if (p == name) return {known, S::Unknown};
  for (std::string_view prefix : {std::string_view("torch.cuda."), std::string_view("torch.")}) {
    if (p.substr(0, prefix.size()) != prefix) continue;
    const std::string_view rest = p.substr(prefix.size());
    for (const Named& s : storages)
      if (rest.size() == s.name.size() + 7 && rest.substr(0, s.name.size()) == s.name &&
          rest.substr(s.name.size()) == "Storage")
        return {K::Storage, s.scalar};
    if (prefix == "torch.")
      for (const Named& d : dtypes)
        if (rest == d.name) return {K::TorchDtype, d.scalar};
  }
  return {};
}

Pickle::Pickle() = default;
Pickle::~Pickle() = default;
Pickle::Pickle(Pickle&&) noexcept = default;
Pickle& Pickle::operator=(Pickle&&) noexcept = default;

PyValue* Pickle::make(Kind kind) {
  arena_.push_back(std::make_unique<PyValue>());
  arena_.back()->kind = kind;
  return arena_.back().get();
}

namespace {

// One run of the machine over `bytes`; parse_pickle's state, split out so each opcode is a short method.
class Machine {
 public:
  Machine(std::string_view bytes, const std::string& where, const PersistentLoad& load, Pickle& out)
      : in_(bytes), where_(where), load_(load), out_(out) {}

  PyValue* run();

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    throw Error(str_cat(where_, ": byte ", op_pos_, " (opcode 0x", hex(op_), "): ", args...));
  }
  static std::string hex(unsigned char c) {
    const char* d = "0123456789abcdef";
    return {d[c >> 4], d[c & 15]};
  }

  const unsigned char* take(uint64_t n) {
    if (n > in_.size() - pos_) fail("truncated: needs ", n, " more bytes, ", in_.size() - pos_, " left");
    const auto* p = reinterpret_cast<const unsigned char*>(in_.data() + pos_);
    pos_ += n;
    return p;
  }
  uint64_t le(int n) {
    const unsigned char* p = take(n);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  std::string_view line() {  // the text opcodes' argument, up to a newline
    const size_t nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos) fail("truncated: no newline ends the argument");
    std::string_view s = in_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return s;
  }

  PyValue* make(Kind k) { return out_.make(k); }
  PyValue* make_int(int64_t v) {
    PyValue* x = make(Kind::Int);
    x->integer = v;
    return x;
  }
  PyValue* make_text(Kind k, std::string_view s) {
    PyValue* x = make(k);
    x->text.assign(s);
    return x;
  }
  PyValue* make_global(std::string_view module, std::string_view name) {
    // Protocol 2 spells Python 3's builtins module by its Python 2 name (pickle's fix_imports).
    if (module == "__builtin__") module = "builtins";
    return make_text(Kind::Global, str_cat(module, ".", name));
  }

  void push(PyValue* v) { stack_.push_back(v); }
  PyValue* pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    PyValue* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  PyValue* top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  // Values pushed since the last MARK are not reachable by pop(): Python's unpickler keeps them on a
  // separate stack, so a POP reaching past a MARK is malformed.
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<PyValue*> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    std::vector<PyValue*> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  PyValue* memo_get(uint64_t i) {
    auto it = memo_.find(i);
    if (it == memo_.end()) fail("memo index ", i, " was never stored (", memo_.size(), " stored)");
    return it->second;
  }

  PyValue* make_tuple(std::vector<PyValue*> items) {
    PyValue* t = make(Kind::Tuple);
    t->items = std::move(items);
    return t;
  }
  PyValue* make_long(uint64_t n);
  PyValue* apply(PyValue* callable, PyValue* args, const char* how);
  PyValue* builtin(const std::string& path, const std::vector<PyValue*>& args);
  void set_items(PyValue* target, const std::vector<PyValue*>& kv);
  void append_items(PyValue* target, const std::vector<PyValue*>& items);
  PyValue* persistent(PyValue* pid);
  bool step();  // one opcode; false at STOP

  std::string_view in_;
  const std::string& where_;
  const PersistentLoad& load_;
  Pickle& out_;
  size_t pos_ = 0, op_pos_ = 0;
  unsigned char op_ = 0;
  std::vector<PyValue*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PyValue*> memo_;
};

PyValue* Machine::make_long(uint64_t n) {
  if (n > 8) fail("integer of ", n, " bytes does not fit in 64 bits");
  const unsigned char* p = take(n);
  uint64_t v = 0;
  for (uint64_t i = n; i-- > 0;) v = (v << 8) | p[i];
  if (n > 0 && n < 8 && (p[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // two's complement: extend the sign
  return make_int(static_cast<int64_t>(v));
}

// REDUCE and NEWOBJ: nothing is called. OrderedDict becomes a Dict; everything else an inert Object.
PyValue* Machine::apply(PyValue* callable, PyValue* args, const char* how) {
  if (!args->is(Kind::Tuple)) fail(how, ": arguments are a ", py_kind_name(args->kind), ", not a tuple");
  if (!callable->is(Kind::Global) && !callable->is(Kind::Object))
    fail(how, ": cannot call a ", py_kind_name(callable->kind), " (", py_repr(*callable), ")");
  if (callable->is(Kind::Global)) {
    if (PyValue* v = builtin(callable->text, args->items)) return v;
  }
  if (callable->is(Kind::Global) && classify(callable->text).known == KnownClass::OrderedDict) {
    PyValue* d = make(Kind::Dict);
    // OrderedDict([(k, v), ...]) carries its items as the argument; torch.save's form adds them later.
    if (!args->items.empty()) {
      const PyValue* pairs = args->items[0];
      if (!pairs->is(Kind::List) && !pairs->is(Kind::Tuple)) fail(how, ": OrderedDict of a ", py_kind_name(pairs->kind));
      for (PyValue* kv : pairs->items) {
        if (!kv->is(Kind::Tuple) || kv->items.size() != 2) fail(how, ": OrderedDict item is not a pair");
        d->entries.emplace_back(kv->items[0], kv->items[1]);
      }
    }
    return d;
  }
  PyValue* o = make(Kind::Object);
  o->text = callable->is(Kind::Global) ? callable->text : callable->text + "()";
  o->items = args->items;
  return o;
}

// The three calls protocol 2 and enums make for plain values, evaluated here without calling
// anything: bytes written as _codecs.encode(latin-1 text, 'latin1') and bytes() (protocol 2 has no
// bytes opcode), and getattr(SomeClass, 'NAME') (enum members at protocol 4 and later, DCP's
// constants), which becomes the class reference "module.SomeClass.NAME".
PyValue* Machine::builtin(const std::string& path, const std::vector<PyValue*>& args) {
  if (path == "_codecs.encode" && args.size() == 2 && args[0]->is(Kind::String) && args[1]->is(Kind::String) &&
      (args[1]->text == "latin1" || args[1]->text == "latin-1")) {
    const std::string& s = args[0]->text;
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {  // UTF-8 of code points below 256: one or two bytes each
      const auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x80) {
        out += static_cast<char>(c);
      } else if ((c == 0xc2 || c == 0xc3) && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xc0) == 0x80) {
        out += static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(s[++i]) & 0x3f));
      } else {
        fail("_codecs.encode of text that is not latin-1");
      }
    }
    return make_text(Kind::Bytes, out);
  }
  if (path == "builtins.bytes" && args.empty()) return make(Kind::Bytes);
  if (path == "builtins.getattr" && args.size() == 2 && args[0]->is(Kind::Global) && args[1]->is(Kind::String))
    return make_text(Kind::Global, args[0]->text + "." + args[1]->text);
  return nullptr;
}

void Machine::set_items(PyValue* target, const std::vector<PyValue*>& kv) {
  if (kv.size() % 2 != 0) fail("odd number of keys and values");
  if (!target->is(Kind::Dict) && !target->is(Kind::Object))
    fail("setting items of a ", py_kind_name(target->kind));
  for (size_t i = 0; i < kv.size(); i += 2) target->entries.emplace_back(kv[i], kv[i + 1]);
}

void Machine::append_items(PyValue* target, const std::vector<PyValue*>& items) {
  // An object (a set, a list subclass) keeps what it is given after its arguments, as an inert record.
  if (!target->is(Kind::List) && !target->is(Kind::Object)) fail("appending to a ", py_kind_name(target->kind));
  target->items.insert(target->items.end(), items.begin(), items.end());
}

PyValue* Machine::persistent(PyValue* pid) {
  if (!load_) fail("persistent id ", py_repr(*pid), " but nothing resolves persistent ids here");
  PyValue* v = load_(out_, *pid);
  if (!v) fail("persistent id ", py_repr(*pid), " resolved to nothing");
  return v;
}

bool Machine::step() {
  op_pos_ = pos_;
  op_ = *take(1);
  switch (op_) {
    case 0x80: {  // PROTO
      const uint64_t v = le(1);
      if (v < 2 || v > 5) fail("pickle protocol ", v, " (protocols 2 to 5 are read)");
      break;
    }
    case 0x95: {  // FRAME: only a hint for buffered readers; its length must still fit
      const uint64_t n = le(8);
      if (n > in_.size() - pos_) fail("frame of ", n, " bytes runs past the end (truncated?)");
      break;
    }
    case '.': if (stack_.empty()) fail("STOP with an empty stack"); return false;
    case '(': marks_.push_back(stack_.size()); break;
    case '0': pop(); break;                    // POP
    case '1': pop_mark(); break;               // POP_MARK
    case '2': push(top()); break;              // DUP
    case 'N': push(make(Kind::None)); break;   // NONE
    case 0x88: case 0x89: {                    // NEWTRUE, NEWFALSE
      PyValue* b = make(Kind::Bool);
      b->boolean = op_ == 0x88;
      push(b);
      break;
    }
    case 'J': push(make_int(static_cast<int32_t>(le(4)))); break;  // BININT
    case 'K': push(make_int(static_cast<int64_t>(le(1)))); break;  // BININT1
    case 'M': push(make_int(static_cast<int64_t>(le(2)))); break;  // BININT2
    case 0x8a: push(make_long(le(1))); break;                      // LONG1
    case 0x8b: push(make_long(le(4))); break;                      // LONG4
    case 'I': {  // INT (text): protocol 0's, and also True/False as "01"/"00"
      const std::string s(line());
      if (s == "01" || s == "00") {
        PyValue* b = make(Kind::Bool);
        b->boolean = s == "01";
        push(b);
        break;
      }
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || errno != 0) fail("INT argument '", s.substr(0, 40), "' is not a 64-bit integer");
      push(make_int(v));
      break;
    }
    case 'G': {  // BINFLOAT: big-endian double
      const unsigned char* p = take(8);
      uint64_t u = 0;
      for (int i = 0; i < 8; ++i) u = (u << 8) | p[i];
      PyValue* f = make(Kind::Float);
      f->real = std::bit_cast<double>(u);
      push(f);
      break;
    }
    case 0x8c: case 'X': case 0x8d: {  // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
      const uint64_t n = le(op_ == 0x8c ? 1 : op_ == 'X' ? 4 : 8);
      push(make_text(Kind::String, {reinterpret_cast<const char*>(take(n)), n}));
      break;
    }
    case 'U': case 'T': {  // SHORT_BINSTRING, BINSTRING (Python 2 str): read as text
      const uint64_t n = le(op_ == 'U' ? 1 : 4);
      push(make_text(Kind::String, {reinterpret_cast<const char*>(take(n)), n}));
      break;
    }
    case 'C': case 'B': case 0x8e: case 0x96: {  // SHORT_BINBYTES, BINBYTES, BINBYTES8, BYTEARRAY8
      const uint64_t n = le(op_ == 'C' ? 1 : op_ == 'B' ? 4 : 8);
      push(make_text(Kind::Bytes, {reinterpret_cast<const char*>(take(n)), n}));
      break;
    }
    case ')': push(make(Kind::Tuple)); break;  // EMPTY_TUPLE
    case ']': push(make(Kind::List)); break;   // EMPTY_LIST
    case '}': push(make(Kind::Dict)); break;   // EMPTY_DICT
    case 0x8f: push(make_text(Kind::Object, "builtins.set")); break;  // EMPTY_SET
    case 0x85: case 0x86: case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
      std::vector<PyValue*> items(static_cast<size_t>(op_ - 0x84));
      for (size_t i = items.size(); i-- > 0;) items[i] = pop();
      push(make_tuple(std::move(items)));
      break;
    }
    case 't': push(make_tuple(pop_mark())); break;  // TUPLE
    case 'l': {  // LIST
      PyValue* l = make(Kind::List);
      l->items = pop_mark();
      push(l);
      break;
    }
    case 0x91: {  // FROZENSET
      PyValue* s = make_text(Kind::Object, "builtins.frozenset");
      s->items = pop_mark();
      push(s);
      break;
    }
    case 'd': {  // DICT
      PyValue* d = make(Kind::Dict);
      set_items(d, pop_mark());
      push(d);
      break;
    }
    case 'a': { PyValue* v = pop(); append_items(top(), {v}); break; }  // APPEND
    case 'e': case 0x90: { auto items = pop_mark(); append_items(top(), items); break; }  // APPENDS, ADDITEMS
    case 's': { PyValue* v = pop(); PyValue* k = pop(); set_items(top(), {k, v}); break; }  // SETITEM
    case 'u': { auto kv = pop_mark(); set_items(top(), kv); break; }  // SETITEMS
    case 'c': {  // GLOBAL "module\nname\n"
      const std::string module(line());
      push(make_global(module, line()));
      break;
    }
    case 0x93: {  // STACK_GLOBAL
      PyValue* name = pop();
      PyValue* module = pop();
      if (!module->is(Kind::String) || !name->is(Kind::String)) fail("STACK_GLOBAL of non-strings");
      push(make_global(module->text, name->text));
      break;
    }
    case 'R': { PyValue* args = pop(); PyValue* f = pop(); push(apply(f, args, "REDUCE")); break; }
    case 0x81: { PyValue* args = pop(); PyValue* cls = pop(); push(apply(cls, args, "NEWOBJ")); break; }
    case 0x92: {  // NEWOBJ_EX: keyword arguments kept as the object's entries
      PyValue* kwargs = pop();
      PyValue* args = pop();
      PyValue* o = apply(pop(), args, "NEWOBJ_EX");
      if (!kwargs->is(Kind::Dict)) fail("NEWOBJ_EX keyword arguments are a ", py_kind_name(kwargs->kind));
      set_items(o, {});
      o->entries.insert(o->entries.end(), kwargs->entries.begin(), kwargs->entries.end());
      push(o);
      break;
    }
    case 'b': {  // BUILD: the state is kept, never applied
      PyValue* state = pop();
      PyValue* target = top();
      if (!target->is(Kind::Object) && !target->is(Kind::Dict)) fail("BUILD on a ", py_kind_name(target->kind));
      target->state = state;
      break;
    }
    case 'Q': push(persistent(pop())); break;  // BINPERSID
    case 'P': push(persistent(make_text(Kind::String, line()))); break;  // PERSID
    case 0x94: memo_.emplace(memo_.size(), top()); break;  // MEMOIZE
    case 'q': memo_[le(1)] = top(); break;                 // BINPUT
    case 'r': memo_[le(4)] = top(); break;                 // LONG_BINPUT
    case 'h': push(memo_get(le(1))); break;                // BINGET
    case 'j': push(memo_get(le(4))); break;                // LONG_BINGET
    case 'p': case 'g': {                                  // PUT, GET (text index)
      const std::string s(line());
      char* end = nullptr;
      const unsigned long long i = std::strtoull(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0') fail("memo index '", s.substr(0, 40), "' is not a number");
      if (op_ == 'p') memo_[i] = top();
      else push(memo_get(i));
      break;
    }
    default: fail("unknown or unsupported opcode");
  }
  return true;
}

PyValue* Machine::run() {
  if (in_.empty()) {
    op_pos_ = 0;
    fail("empty pickle");
  }
  while (true) {
    if (pos_ >= in_.size()) fail("truncated: the pickle ends without STOP");
    if (!step()) return stack_.back();
  }
}

}  // namespace

Pickle parse_pickle(std::string_view bytes, const std::string& where, const PersistentLoad& load) {
  Pickle p;
  Machine m(bytes, where, load, p);
  p.root_ = m.run();
  return p;
}

}  // namespace tessera::ckpt
