// A pickle writer for what torch.save puts in data.pkl (the inverse of pickle_reader.h, for
// `tessera convert --saver megatron`): protocol 2, as torch.save's default pickle_protocol, with the
// opcodes Python's own pickler emits for these values, so torch.load (PyTorch 1.x and 2.x, also with
// weights_only=False) rebuilds them: None, bools, ints (BININT1/BININT2/BININT, LONG1 beyond 32 bits),
// floats (BINFLOAT), str (BINUNICODE), tuples, lists, dicts, a class or module attribute (GLOBAL),
// collections.OrderedDict (the class REDUCEd with () and its items SETITEMS, as OrderedDict.__reduce__
// gives them), an argparse.Namespace (copyreg's protocol-2 form: the class, (), NEWOBJ, then its
// __dict__ with BUILD) and a call (GLOBAL, argument tuple, REDUCE) such as _rebuild_tensor_v2, whose
// storage is a persistent id (BINPERSID), optionally followed by a state BUILD applies (numpy's arrays and
// dtypes, as their __reduce__ gives them), bytes as protocol 2 writes them (_codecs.encode of their
// latin-1 text, 'latin1'), instances (NEWOBJ, then BUILD their state) and dicts keyed by them. No memo:
// nothing written here is shared.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::ckpt {

struct PickleOut {
  enum class Kind : uint8_t { None, Bool, Int, Float, String, Bytes, Tuple, List, Dict, OrderedDict, Namespace, Global,
                              Call, PersistentId, Object, PairDict };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;                 // String, Bytes; Global and Call: "module\nname"
  std::vector<PickleOut> items;     // Tuple, List; Call: the arguments; PersistentId: the id's tuple items;
                                    // PairDict: key, value, key, value, ...
  std::vector<std::pair<std::string, PickleOut>> entries;  // Dict, OrderedDict, Namespace (string keys, in order)
  std::vector<PickleOut> state;     // Call: none, or the one value BUILD gives the object made; Object: that value

  static PickleOut none() { return {}; }
  static PickleOut boolean_of(bool b);
  static PickleOut int_of(int64_t v);
  static PickleOut float_of(double v);
  static PickleOut str(std::string s);
  static PickleOut bytes(std::string b);
  static PickleOut tuple(std::vector<PickleOut> items);
  static PickleOut list(std::vector<PickleOut> items);
  static PickleOut dict(Kind kind = Kind::Dict);  // Dict, OrderedDict or Namespace, filled through set()
  static PickleOut global(const std::string& module, const std::string& name);
  static PickleOut call(const std::string& module, const std::string& name, std::vector<PickleOut> args);
  // A call whose result then gets `state` through BUILD (object.__reduce__'s third item).
  static PickleOut call_with_state(const std::string& module, const std::string& name, std::vector<PickleOut> args,
                                   PickleOut state);
  static PickleOut persistent_id(std::vector<PickleOut> id);
  // An instance of module.name made as copyreg's protocol-2 form makes it (the class, (), NEWOBJ), then given
  // `state` by BUILD: a dataclass's __dict__, or what its __setstate__ takes (PyTorch's DCP metadata).
  static PickleOut object(const std::string& module, const std::string& name, PickleOut state);
  // A dict whose keys are not strings (objects, such as DCP's MetadataIndex), in this order.
  static PickleOut pair_dict(std::vector<std::pair<PickleOut, PickleOut>> pairs);

  PickleOut& set(const std::string& key, PickleOut value);  // appends an entry; returns *this
};

// The pickle's bytes: PROTO 2, the value, STOP.
std::string write_pickle(const PickleOut& value);

}  // namespace tessera::ckpt
