#include "ckpt/pickle_writer.h"

#include <cstring>

#include "core/check.h"

namespace tessera::ckpt {

PickleOut PickleOut::boolean_of(bool b) {
  PickleOut v;
  v.kind = Kind::Bool;
  v.boolean = b;
  return v;
}
PickleOut PickleOut::int_of(int64_t i) {
  PickleOut v;
  v.kind = Kind::Int;
  v.integer = i;
  return v;
}
PickleOut PickleOut::float_of(double d) {
  PickleOut v;
  v.kind = Kind::Float;
  v.real = d;
  return v;
}
PickleOut PickleOut::str(std::string s) {
  PickleOut v;
  v.kind = Kind::String;
  v.text = std::move(s);
  return v;
}
PickleOut PickleOut::bytes(std::string b) {
  PickleOut v = str(std::move(b));
  v.kind = Kind::Bytes;
  return v;
}
PickleOut PickleOut::tuple(std::vector<PickleOut> items) {
  PickleOut v;
  v.kind = Kind::Tuple;
  v.items = std::move(items);
  return v;
}
PickleOut PickleOut::list(std::vector<PickleOut> items) {
  PickleOut v = tuple(std::move(items));
  v.kind = Kind::List;
  return v;
}
PickleOut PickleOut::dict(Kind kind) {
  TESSERA_CHECK(kind == Kind::Dict || kind == Kind::OrderedDict || kind == Kind::Namespace,
                "PickleOut::dict: not a mapping kind");
  PickleOut v;
  v.kind = kind;
  return v;
}
PickleOut PickleOut::global(const std::string& module, const std::string& name) {
  PickleOut v;
  v.kind = Kind::Global;
  v.text = module + "\n" + name;
  return v;
}
PickleOut PickleOut::call(const std::string& module, const std::string& name, std::vector<PickleOut> args) {
  PickleOut v = global(module, name);
  v.kind = Kind::Call;
  v.items = std::move(args);
  return v;
}
PickleOut PickleOut::call_with_state(const std::string& module, const std::string& name, std::vector<PickleOut> args,
                                     PickleOut state) {
  PickleOut v = call(module, name, std::move(args));
  v.state.push_back(std::move(state));
  return v;
}
PickleOut PickleOut::persistent_id(std::vector<PickleOut> id) {
  PickleOut v = tuple(std::move(id));
  v.kind = Kind::PersistentId;
  return v;
}
PickleOut PickleOut::object(const std::string& module, const std::string& name, PickleOut state) {
  PickleOut v = global(module, name);
  v.kind = Kind::Object;
  v.state.push_back(std::move(state));
  return v;
}
PickleOut PickleOut::pair_dict(std::vector<std::pair<PickleOut, PickleOut>> pairs) {
  PickleOut v;
  v.kind = Kind::PairDict;
  for (auto& [key, value] : pairs) {
    v.items.push_back(std::move(key));
    v.items.push_back(std::move(value));
  }
  return v;
}
PickleOut& PickleOut::set(const std::string& key, PickleOut value) {
  entries.emplace_back(key, std::move(value));
  return *this;
}

namespace {

// Opcodes of protocol 2 (Python's Lib/pickle.py names).
constexpr char kMark = '(', kStop = '.', kNone = 'N', kBinInt = 'J', kBinInt1 = 'K', kBinInt2 = 'M',
               kBinFloat = 'G', kBinUnicode = 'X', kGlobal = 'c', kEmptyTuple = ')', kTuple = 't', kEmptyList = ']',
               kAppends = 'e', kEmptyDict = '}', kSetItems = 'u', kReduce = 'R', kBuild = 'b', kBinPersId = 'Q';
constexpr unsigned char kProto = 0x80, kNewObj = 0x81, kTuple1 = 0x85, kTuple2 = 0x86, kTuple3 = 0x87,
                        kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a;
constexpr size_t kBatch = 1000;  // Python's pickler batches APPENDS and SETITEMS by 1000

class PickleEmitter {
 public:
  std::string out;

  void op(unsigned char c) { out.push_back(static_cast<char>(c)); }
  void le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op(kBinInt1);
      le(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      op(kBinInt2);
      le(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op(kBinInt);
      le(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
    } else {  // LONG1: the shortest little-endian two's complement
      std::string bytes;
      uint64_t u = static_cast<uint64_t>(v);
      for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
      const char fill = v < 0 ? static_cast<char>(0xFF) : 0;
      while (bytes.size() > 1 && bytes.back() == fill && ((bytes[bytes.size() - 2] & 0x80) != 0) == (v < 0))
        bytes.pop_back();
      op(kLong1);
      le(bytes.size(), 1);
      out += bytes;
    }
  }
  void real(double d) {
    op(kBinFloat);
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));  // big-endian
  }
  void string(const std::string& s) {
    op(kBinUnicode);
    le(s.size(), 4);
    out += s;
  }
  void global(const std::string& module_newline_name) {
    op(kGlobal);
    out += module_newline_name;
    out.push_back('\n');
  }
  void tuple(const std::vector<PickleOut>& items) {
    if (items.empty()) return op(kEmptyTuple);
    if (items.size() > 3) op(kMark);
    for (const PickleOut& i : items) value(i);
    if (items.size() > 3) return op(kTuple);
    op(items.size() == 1 ? kTuple1 : items.size() == 2 ? kTuple2 : kTuple3);
  }
  void set_items(const std::vector<std::pair<std::string, PickleOut>>& entries) {
    for (size_t first = 0; first < entries.size(); first += kBatch) {
      op(kMark);
      for (size_t i = first; i < entries.size() && i < first + kBatch; ++i) {
        string(entries[i].first);
        value(entries[i].second);
      }
      op(kSetItems);
    }
  }
  void value(const PickleOut& v) {
    using K = PickleOut::Kind;
    switch (v.kind) {
      case K::None: return op(kNone);
      case K::Bool: return op(v.boolean ? kNewTrue : kNewFalse);
      case K::Int: return integer(v.integer);
      case K::Float: return real(v.real);
      case K::String: return string(v.text);
      case K::Bytes: {  // protocol 2 has no bytes opcode: Python's pickler writes _codecs.encode(latin-1 text, 'latin1')
        if (v.text.empty()) {
          global("__builtin__\nbytes");
          op(kEmptyTuple);
          return op(kReduce);
        }
        std::string utf8;  // each byte a code point below 256, in UTF-8
        for (const char c : v.text) {
          const auto b = static_cast<unsigned char>(c);
          if (b < 0x80) {
            utf8.push_back(static_cast<char>(b));
          } else {
            utf8.push_back(static_cast<char>(0xC0 | (b >> 6)));
            utf8.push_back(static_cast<char>(0x80 | (b & 0x3F)));
          }
        }
        global("_codecs\nencode");
        string(utf8);
        string("latin1");
        op(kTuple2);
        return op(kReduce);
      }
      case K::Tuple: return tuple(v.items);
      case K::List:
        op(kEmptyList);
        for (size_t first = 0; first < v.items.size(); first += kBatch) {
          op(kMark);
          for (size_t i = first; i < v.items.size() && i < first + kBatch; ++i) value(v.items[i]);
          op(kAppends);
        }
        return;
      case K::Dict:
        op(kEmptyDict);
        return set_items(v.entries);
      case K::OrderedDict:
        global("collections\nOrderedDict");
        op(kEmptyTuple);
        op(kReduce);
        return set_items(v.entries);
      case K::Namespace:  // copyreg.__reduce_ex__ at protocol 2: cls.__new__(cls), then __dict__
        global("argparse\nNamespace");
        op(kEmptyTuple);
        op(kNewObj);
        op(kEmptyDict);
        set_items(v.entries);
        return op(kBuild);
      case K::Global: return global(v.text);
      case K::Call:
        global(v.text);
        tuple(v.items);
        op(kReduce);
        if (v.state.empty()) return;
        value(v.state[0]);
        return op(kBuild);
      case K::PersistentId:
        tuple(v.items);
        return op(kBinPersId);
      case K::Object:  // copyreg.__reduce_ex__ at protocol 2: cls.__new__(cls), then its state
        global(v.text);
        op(kEmptyTuple);
        op(kNewObj);
        value(v.state[0]);
        return op(kBuild);
      case K::PairDict:
        op(kEmptyDict);
        for (size_t first = 0; first < v.items.size(); first += 2 * kBatch) {
          op(kMark);
          for (size_t i = first; i < v.items.size() && i < first + 2 * kBatch; ++i) value(v.items[i]);
          op(kSetItems);
        }
        return;
    }
  }
};

}  // namespace

std::string write_pickle(const PickleOut& value) {
  PickleEmitter e;
  e.op(kProto);
  e.op(2);
  e.value(value);
  e.op(kStop);
  return std::move(e.out);
}

}  // namespace tessera::ckpt
