#include "ckpt/pickle_reader.h"

#include <gtest/gtest.h>

#include "ckpt/python_fixture_testing.h"
#include "core/check.h"

namespace tessera::ckpt {
namespace {

using K = PyValue::Kind;
using testing::FixtureDir;

// The value kinds and class forms a checkpoint holds, pickled by Python itself at each protocol 2-5.
const char* kValuesScript = R"(
import sys, pickle, argparse, enum, collections
class Color(enum.Enum):
    RED = 1
shared = [1, 2]
obj = {'int': 7, 'neg': -300, 'big': 2**40, 'min': -2**63, 'u1': 255, 'u2': 65535, 'i4': -2**31,
       'f': 1.5, 's': 'h\u00e9llo', 'long_s': 'x' * 300, 'b': b'\x00\x01', 'long_b': b'y' * 300, 'high_b': b'\xff\x80\x7f',
       'n': None, 't': True, 'fa': False, 'tup0': (), 'tup1': ('x',), 'tup3': (1, 2, 3), 'tup5': (1, 2, 3, 4, 5),
       'list': [1, [2, 3]], 'od': collections.OrderedDict([('a', 1), ('b', 2)]),
       'ns': argparse.Namespace(num_layers=2, hidden_size=8), 'enum': Color.RED,
       'shared': shared, 'shared2': shared, 'set': {4}, 'nested': {3: 'three'}}
for p in (2, 3, 4, 5):
    open(sys.argv[1] + '/p%d.pkl' % p, 'wb').write(pickle.dumps(obj, protocol=p))
)";

TEST(PickleReaderTest, ReadsPythonPicklesAtEveryProtocol) {
  const std::string py = testing::find_python("");
  if (py.empty()) GTEST_SKIP() << "no python3 to write the fixture pickles";
  FixtureDir dir;
  ASSERT_TRUE(dir.run_python(py, kValuesScript));
  for (int protocol = 2; protocol <= 5; ++protocol) {
    SCOPED_TRACE(str_cat("protocol ", protocol));
    const std::string bytes = testing::read_file_bytes(dir.file(str_cat("p", protocol, ".pkl")));
    Pickle p = parse_pickle(bytes, "p.pkl");
    const PyValue& r = p.root();
    ASSERT_TRUE(r.is(K::Dict));
    EXPECT_EQ(r.get("int")->integer, 7);
    EXPECT_EQ(r.get("neg")->integer, -300);
    EXPECT_EQ(r.get("big")->integer, int64_t{1} << 40);
    EXPECT_EQ(r.get("min")->integer, INT64_MIN);
    EXPECT_EQ(r.get("u1")->integer, 255);
    EXPECT_EQ(r.get("u2")->integer, 65535);
    EXPECT_EQ(r.get("i4")->integer, INT32_MIN);
    EXPECT_EQ(r.get("f")->real, 1.5);
    EXPECT_EQ(r.get("s")->text, "h\xc3\xa9llo");
    EXPECT_EQ(r.get("long_s")->text, std::string(300, 'x'));
    // (Protocol 2 writes bytes as _codecs.encode(text, 'latin1'), which the machine evaluates.)
    EXPECT_TRUE(r.get("b")->is(K::Bytes));
    EXPECT_EQ(r.get("b")->text, std::string("\0\1", 2));
    EXPECT_EQ(r.get("long_b")->text, std::string(300, 'y'));
    EXPECT_EQ(r.get("high_b")->text, "\xff\x80\x7f");
    EXPECT_TRUE(r.get("n")->is(K::None));
    EXPECT_TRUE(r.get("t")->boolean);
    EXPECT_TRUE(r.get("fa")->is(K::Bool) && !r.get("fa")->boolean);
    EXPECT_TRUE(r.get("tup0")->is(K::Tuple) && r.get("tup0")->items.empty());
    EXPECT_EQ(r.get("tup1")->items[0]->text, "x");
    EXPECT_EQ(r.get("tup3")->items[2]->integer, 3);
    EXPECT_EQ(r.get("tup5")->items.size(), 5u);
    EXPECT_EQ(r.get("list")->items[1]->items[1]->integer, 3);
    const PyValue* od = r.get("od");
    ASSERT_TRUE(od->is(K::Dict));
    ASSERT_EQ(od->entries.size(), 2u);
    EXPECT_EQ(od->entries[0].first->text, "a");  // order kept
    EXPECT_EQ(od->get("b")->integer, 2);
    const PyValue* ns = r.get("ns");
    ASSERT_TRUE(ns->is(K::Object));
    EXPECT_EQ(ns->text, "argparse.Namespace");
    EXPECT_EQ(classify(ns->text).known, KnownClass::Namespace);
    ASSERT_NE(ns->state, nullptr);
    EXPECT_EQ(ns->state->get("hidden_size")->integer, 8);
    // An enum member: Python 3.11 writes getattr(Color, 'RED'), a reference to the member; older
    // Pythons the class called with the value, kept as an inert object.
    const PyValue* e = r.get("enum");
    if (e->is(K::Global)) {
      EXPECT_EQ(e->text, "__main__.Color.RED");
    } else {
      EXPECT_EQ(e->text, "__main__.Color");
      EXPECT_EQ(e->items.at(0)->integer, 1);
    }
    EXPECT_EQ(r.get("shared"), r.get("shared2"));  // the memo: one value in two places
    EXPECT_EQ(r.get("set")->text, "builtins.set");
    EXPECT_EQ(r.get("nested")->entries[0].first->integer, 3);
  }
}

TEST(PickleReaderTest, NumpyArraysAreRecognisedAndKeptInert) {
  const std::string py = testing::find_python("numpy");
  if (py.empty()) GTEST_SKIP() << "no python3 with numpy";
  FixtureDir dir;
  ASSERT_TRUE(dir.run_python(py, R"(
import sys, pickle, numpy as np
open(sys.argv[1] + '/np.pkl', 'wb').write(pickle.dumps({'a': np.arange(6, dtype=np.float32).reshape(2, 3),
                                                        's': np.float64(0.25)}, protocol=2))
)"));
  Pickle p = parse_pickle(testing::read_file_bytes(dir.file("np.pkl")), "np.pkl");
  const PyValue* a = p.root().get("a");
  ASSERT_TRUE(a->is(K::Object));
  EXPECT_EQ(classify(a->text).known, KnownClass::NumpyReconstruct);
  EXPECT_EQ(classify(a->items[0]->text).known, KnownClass::NumpyNdarray);
  // The state numpy rebuilds from: (version, shape, dtype, fortran order, raw data).
  ASSERT_TRUE(a->state && a->state->is(K::Tuple) && a->state->items.size() == 5);
  EXPECT_EQ(a->state->items[1]->items[1]->integer, 3);
  const PyValue* dtype = a->state->items[2];
  EXPECT_EQ(classify(dtype->text).known, KnownClass::NumpyDtype);
  EXPECT_EQ(dtype->items[0]->text, "f4");
  EXPECT_EQ(a->state->items[4]->text.size(), 24u);
  const PyValue* s = p.root().get("s");
  EXPECT_EQ(classify(s->text).known, KnownClass::NumpyScalar);
}

TEST(PickleReaderTest, ClassifiesTorchClassesUnderBothPyTorchNames) {
  EXPECT_EQ(classify("torch._utils._rebuild_tensor_v2").known, KnownClass::RebuildTensorV2);
  EXPECT_EQ(classify("torch._utils._rebuild_tensor").known, KnownClass::RebuildTensor);
  EXPECT_EQ(classify("torch._utils._rebuild_parameter").known, KnownClass::RebuildParameter);
  const ClassInfo bf16 = classify("torch.BFloat16Storage");
  EXPECT_EQ(bf16.known, KnownClass::Storage);
  EXPECT_EQ(bf16.scalar, TorchScalar::BF16);
  EXPECT_EQ(classify("torch.cuda.HalfStorage").scalar, TorchScalar::F16);
  EXPECT_EQ(classify("torch.ByteStorage").scalar, TorchScalar::U8);
  EXPECT_EQ(classify("torch.LongStorage").scalar, TorchScalar::I64);
  EXPECT_EQ(classify("torch.storage.UntypedStorage").known, KnownClass::UntypedStorage);
  EXPECT_EQ(classify("torch.storage._UntypedStorage").known, KnownClass::UntypedStorage);  // 1.x
  EXPECT_EQ(classify("torch.storage.TypedStorage").known, KnownClass::TypedStorage);
  EXPECT_EQ(classify("torch.storage._TypedStorage").known, KnownClass::TypedStorage);  // 1.x
  EXPECT_EQ(classify("torch.bfloat16").known, KnownClass::TorchDtype);
  EXPECT_EQ(classify("torch.bfloat16").scalar, TorchScalar::BF16);
  EXPECT_EQ(classify("numpy._core.multiarray._reconstruct").known, KnownClass::NumpyReconstruct);  // numpy 2
  EXPECT_EQ(classify("collections.OrderedDict").known, KnownClass::OrderedDict);
  EXPECT_EQ(classify("torch.NoSuchStorage").known, KnownClass::Unknown);
  EXPECT_EQ(classify("os.system").known, KnownClass::Unknown);
}

TEST(PickleReaderTest, PersistentIdsGoToTheCallback) {
  // (K 5 Q .): BINPERSID of the int 5, resolved to a string.
  Pickle p = parse_pickle(std::string("\x80\x02K\x05Q.", 6), "x", [](Pickle& pk, const PyValue& pid) {
    PyValue* v = pk.make(K::String);
    v->text = str_cat("storage ", pid.integer);
    return v;
  });
  EXPECT_EQ(p.root().text, "storage 5");
}

TEST(PickleReaderTest, SelfReferenceIsHeldWithoutRecursion) {
  // EMPTY_LIST MEMOIZE BINGET 0 APPEND STOP: a list containing itself.
  Pickle p = parse_pickle(std::string("\x80\x04]\x94h\x00" "a.", 8), "x");
  ASSERT_EQ(p.root().items.size(), 1u);
  EXPECT_EQ(p.root().items[0], &p.root());
  EXPECT_FALSE(py_repr(p.root()).empty());
}

TEST(PickleReaderTest, MalformedPicklesAreErrorsNamingTheFileAndProblem) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty pickle"},
      {"\x80\x02", "ends without STOP"},
      {"\x80\x09.", "pickle protocol 9"},
      {"\x80\x02\xff.", "unknown or unsupported opcode"},
      {"\x80\x02" "0.", "stack underflow"},
      {"\x80\x02(K\x01" "0" "0.", "stack underflow"},  // a POP may not reach past a MARK
      {"\x80\x02h\x05.", "memo index 5 was never stored"},
      {"\x80\x02]K\x01" "b.", "BUILD on a list"},
      {"\x80\x02K\x01)R.", "cannot call a int"},
      {std::string("\x80\x02\x8a\x09", 4) + std::string(9, '\1') + ".", "does not fit in 64 bits"},
      {"\x80\x02K\x01Q.", "nothing resolves persistent ids"},
      {"\x80\x02t.", "no MARK"},
      {"\x80\x02K\x01K\x02K\x03s.", "setting items of a int"},
      {std::string("\x80\x02X\xff\xff\x00\x00" "ab.", 10), "truncated"},
      {std::string("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N.", 13), "frame of 255 bytes"},
  };
  for (const auto& [bytes, expected] : cases) {
    try {
      parse_pickle(bytes, "ckpt.pt: archive/data.pkl");
      ADD_FAILURE() << "accepted: " << expected;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("ckpt.pt: archive/data.pkl: byte ", 0), 0u) << what;
      EXPECT_NE(what.find(expected), std::string::npos) << what << " (expected '" << expected << "')";
    }
  }
}

TEST(PickleReaderTest, TruncatedAndCorruptedPicklesAreErrors) {
  const std::string py = testing::find_python("");
  if (py.empty()) GTEST_SKIP() << "no python3 to write the fixture pickles";
  FixtureDir dir;
  ASSERT_TRUE(dir.run_python(py, kValuesScript));
  const std::string good = testing::read_file_bytes(dir.file("p4.pkl"));
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_THROW(parse_pickle(good.substr(0, n), "p4.pkl"), Error) << "truncated to " << n;
  auto load = [](Pickle& pk, const PyValue&) { return pk.make(K::None); };
  int refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0xa5);
    try {
      Pickle p = parse_pickle(bad, "p4.pkl", load);
      (void)py_repr(p.root());
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("p4.pkl: byte ", 0), 0u) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
}

// PyTorch 1.13's DCP writer (torch.distributed._shard.checkpoint; torch.distributed.checkpoint in
// 2.x) in one process. Debian's torch 1.13 on Python 3.11 fails to import that module (a dataclass
// default Python 3.11 rejects as mutable), so the script lets such classes hash by identity first.
const char* kDcpScript = R"(
import sys, dataclasses
_process = dataclasses._process_class
def _hashable(cls, *a, **k):
    c = _process(cls, *a, **k)
    if c.__hash__ is None: c.__hash__ = object.__hash__
    return c
dataclasses._process_class = _hashable
import torch
try:
    import torch.distributed.checkpoint as dcp
    save = getattr(dcp, 'save_state_dict', None) or dcp.save
except ImportError:
    import torch.distributed._shard.checkpoint as dcp
    save = dcp.save_state_dict
sd = {'decoder.layers.mlp.linear_fc1.weight': torch.arange(24.).reshape(2, 3, 4),
      'embedding.word_embeddings.weight': torch.ones(5, 8, dtype=torch.bfloat16), 'iteration': 7}
save(sd, storage_writer=dcp.FileSystemWriter(sys.argv[1] + '/dcp'), no_dist=True)
)";

TEST(PickleReaderTest, ReadsDcpMetadata) {
  const std::string py = testing::find_python("torch");
  if (py.empty()) GTEST_SKIP() << "no python3 with torch (Debian's python3-torch) to write DCP metadata";
  FixtureDir dir;
  ASSERT_TRUE(dir.run_python(py, kDcpScript));
  Pickle p = parse_pickle(testing::read_file_bytes(dir.file("dcp/.metadata")), "dcp/.metadata");
  const PyValue& md = p.root();
  ASSERT_TRUE(md.is(K::Object));
  EXPECT_NE(md.text.find("checkpoint.metadata.Metadata"), std::string::npos) << md.text;
  ASSERT_TRUE(md.state && md.state->is(K::Dict));
  const PyValue* entries = md.state->get("state_dict_metadata");
  ASSERT_TRUE(entries && entries->is(K::Dict));
  // Each tensor's entry is a TensorStorageMetadata whose state holds size=torch.Size((...)).
  auto shape_of = [&](const std::string& key) {
    const PyValue* e = entries->get(key);
    if (!e || !e->state) return std::string("missing");
    const PyValue* size = e->state->get("size");
    if (!size || classify(size->text).known != KnownClass::TorchSize || size->items.size() != 1) return std::string("?");
    return py_repr(*size->items[0]);
  };
  EXPECT_EQ(shape_of("decoder.layers.mlp.linear_fc1.weight"), "(2, 3, 4)");
  EXPECT_EQ(shape_of("embedding.word_embeddings.weight"), "(5, 8)");
  const PyValue* it = entries->get("iteration");
  ASSERT_NE(it, nullptr);
  EXPECT_NE(it->text.find("BytesStorageMetadata"), std::string::npos) << it->text;
}

}  // namespace
}  // namespace tessera::ckpt
