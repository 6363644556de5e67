#include "ckpt/torch_file.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ckpt/python_fixture_testing.h"
#include "kernels/precision.h"

namespace tessera::ckpt {
namespace {

using SK = StateNode::Kind;
using testing::FixtureDir;

// A Megatron-shaped legacy checkpoint (model_optim_rng.pt) written by torch.save, with the expected
// tensors dumped beside it as JSON (every value as a float64, exact for each dtype used here), and
// malformed archives made from the same pieces.
const char* kMegatronScript = R"(
import sys, io, json, pickle, zipfile, argparse, enum, collections, random
import numpy as np, torch
d = sys.argv[1]
class AttnMaskType(enum.Enum):
    causal = 2
torch.manual_seed(0)
emb, base, flat = torch.randn(5, 8), torch.randn(8, 6), torch.randn(20)
model = collections.OrderedDict()
model['embedding.word_embeddings.weight'] = emb
model['decoder.layers.0.self_attention.linear_qkv.weight'] = torch.randn(24, 8).to(torch.bfloat16)
model['decoder.layers.0.mlp.linear_fc1.weight'] = base.t()           # a transposed view
model['decoder.layers.0.input_layernorm.weight'] = flat[:8]          # two tensors, one storage
model['decoder.layers.0.mlp.linear_fc2.weight'] = flat[8:20].view(3, 4)
model['decoder.layers.0.sliced'] = base[2:5, 1:4]                    # an offset and strides
model['output_layer.weight'] = emb                                   # one tensor in two places
model['half'] = torch.randn(3, 2).half()
model['double'] = torch.randn(4).double()
model['long'] = torch.arange(-3, 3, dtype=torch.int64)
model['int'] = torch.arange(5, dtype=torch.int32) * 1000
model['int8'] = torch.tensor([-128, 0, 127], dtype=torch.int8)
model['uint8'] = torch.tensor([0, 200, 255], dtype=torch.uint8)
model['bool'] = torch.tensor([True, False, True])
model['scalar'] = torch.tensor(2.5)
model['empty'] = torch.zeros(0, 4)
model['expanded'] = torch.randn(3, 1).expand(3, 4)                   # a stride of 0
model._metadata = collections.OrderedDict([('', {'version': 1})])
args = argparse.Namespace(num_layers=2, hidden_size=8, num_attention_heads=2, seq_length=16,
                          params_dtype=torch.bfloat16, attn_mask_type=AttnMaskType.causal,
                          loss_scale=np.float64(0.5), tensor_model_parallel_size=1)
sd = {'args': args, 'checkpoint_version': 3.0, 'iteration': 10, 'model': model,
      'rng_state': [{'random_rng_state': random.getstate(), 'np_rng_state': np.random.get_state(),
                     'torch_rng_state': torch.get_rng_state()}],
      'np_fortran': np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))}
torch.save(sd, d + '/model_optim_rng.pt')
expected = {k: {'dtype': str(v.dtype)[6:], 'shape': list(v.shape), 'values': v.double().flatten().tolist()}
            for k, v in model.items()}
expected['np_rng_key'] = sd['rng_state'][0]['np_rng_state'][1].tolist()
json.dump(expected, open(d + '/expected.json', 'w'))

# The same archive with its first storage cut to half.
with zipfile.ZipFile(d + '/model_optim_rng.pt') as src, zipfile.ZipFile(d + '/short_storage.pt', 'w') as z:
    for info in src.infolist():
        b = src.read(info.filename)
        z.writestr(info.filename, b[:len(b) // 2] if info.filename.endswith('/data/0') else b)

# Hand-made data.pkl files: a view longer than its storage, a tensor whose storage is an int.
class Storage: pass
class View:
    def __init__(self, st, size, stride=(1,)): self.st, self.size, self.stride = st, size, stride
    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, (self.st, 0, self.size, self.stride, False, collections.OrderedDict()))
class P(pickle.Pickler):
    def persistent_id(self, o):
        return ('storage', torch.FloatStorage, '0', 'cpu', 4) if isinstance(o, Storage) else None
def archive(name, obj, data=b'\0' * 16):
    buf = io.BytesIO()
    P(buf, protocol=2).dump(obj)
    with zipfile.ZipFile(d + '/' + name, 'w') as z:
        z.writestr('archive/data.pkl', buf.getvalue())
        z.writestr('archive/data/0', data)
archive('short_view.pt', {'model': {'w': View(Storage(), (10,))}})
archive('int_storage.pt', {'model': {'w': View(5, (2,))}})
archive('repeated.pt', {'model': {'w': View(Storage(), (2**40,), (0,))}})
# PyTorch 2.x's _rebuild_tensor_v3 (an untyped storage, counted in bytes, and the dtype as an
# argument), which torch 1.13 lacks: a stand-in of that name lets pickle write the reference.
def _rebuild_tensor_v3(*args): pass
_rebuild_tensor_v3.__module__ = 'torch._utils'
torch._utils._rebuild_tensor_v3 = _rebuild_tensor_v3
class Untyped: pass
class V3:
    def __reduce__(self):
        return (_rebuild_tensor_v3, (Untyped(), 1, (2,), (1,), False, collections.OrderedDict(), torch.bfloat16, None))
class P3(pickle.Pickler):
    def persistent_id(self, o):
        return ('storage', getattr(torch, 'UntypedStorage', None) or torch.storage._UntypedStorage, '0', 'cpu', 16) if isinstance(o, Untyped) else None
buf = io.BytesIO()
P3(buf, protocol=2).dump({'v3': V3()})
with zipfile.ZipFile(d + '/v3.pt', 'w') as z:
    z.writestr('archive/data.pkl', buf.getvalue())
    z.writestr('archive/data/0', torch.arange(8, dtype=torch.bfloat16).view(torch.int16).numpy().tobytes())
open(d + '/legacy.pt', 'wb').write(pickle.dumps({'a': 1}, protocol=2))
)";

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.host_f32()[i];
    case DType::BF16: return bf16_to_fp32(t.host_bf16()[i]);
    case DType::F16: return kernels::fp16_to_fp32(static_cast<const uint16_t*>(t.host_raw())[i]);
    case DType::I32: return t.host_i32()[i];
    case DType::I64: return static_cast<double>(t.host_i64()[i]);
  }
  return 0;
}

class TorchFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    python_ = testing::find_python("torch");
    if (python_.empty()) GTEST_SKIP() << "no python3 with torch (Debian's python3-torch) to write the fixtures";
    ASSERT_TRUE(dir_.run_python(python_ + " -W ignore", kMegatronScript));
  }
  // Loading `name` fails with an error that starts with its path and contains each of `parts`.
  void expect_error(const std::string& name, std::initializer_list<std::string> parts) {
    const std::string path = dir_.file(name);
    try {
      load_torch_file(path);
      ADD_FAILURE() << name << " was read";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;
      for (const std::string& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what << " lacks '" << p << "'";
    }
  }
  std::string python_;
  FixtureDir dir_;
};

TEST_F(TorchFileTest, ReadsAMegatronShapedCheckpoint) {
  const StateNode sd = load_torch_file(dir_.file("model_optim_rng.pt"));
  ASSERT_TRUE(sd.is(SK::Dict));
  EXPECT_EQ(sd.find("iteration")->integer, 10);
  EXPECT_EQ(sd.find("checkpoint_version")->real, 3.0);
  const StateNode* args = sd.find("args");
  ASSERT_TRUE(args && args->is(SK::Object));
  EXPECT_EQ(args->text, "argparse.Namespace");
  EXPECT_EQ(args->find("num_layers")->integer, 2);
  EXPECT_EQ(args->find("hidden_size")->integer, 8);
  EXPECT_EQ(args->find("params_dtype")->text, "torch.bfloat16");
  // An enum member, kept as a record: getattr(AttnMaskType, 'causal') from Python 3.11, or the class
  // called with its value from older Pythons.
  const StateNode* mask = args->find("attn_mask_type");
  if (mask->items.empty()) {
    EXPECT_EQ(mask->text, "__main__.AttnMaskType.causal");
  } else {
    EXPECT_EQ(mask->text, "__main__.AttnMaskType");
    EXPECT_EQ(mask->items[0].integer, 2);
  }
  EXPECT_EQ(args->find("loss_scale")->real, 0.5);  // a numpy scalar
  const StateNode& rng = sd.find("rng_state")->items.at(0);
  EXPECT_EQ(rng.find("torch_rng_state")->stored, TorchScalar::U8);
  nlohmann::json expected = nlohmann::json::parse(testing::read_file_bytes(dir_.file("expected.json")));
  // numpy arrays: the saved numpy RNG key (uint32, as int64), and a Fortran-order array in row-major.
  const StateNode& key = rng.find("np_rng_state")->items.at(1);
  ASSERT_TRUE(key.is(SK::Tensor));
  EXPECT_EQ(key.stored, TorchScalar::U32);
  const std::vector<int64_t> want_key = expected.at("np_rng_key").get<std::vector<int64_t>>();
  expected.erase("np_rng_key");
  ASSERT_EQ(key.tensor.numel(), 624);
  EXPECT_EQ(std::vector<int64_t>(key.tensor.host_i64(), key.tensor.host_i64() + 624), want_key);
  const StateNode* fortran = sd.find("np_fortran");
  ASSERT_TRUE(fortran && fortran->is(SK::Tensor));
  EXPECT_EQ(fortran->tensor.shape(), Shape({2, 3}));
  EXPECT_EQ(std::vector<float>(fortran->tensor.host_f32(), fortran->tensor.host_f32() + 6),
            std::vector<float>({0, 1, 2, 3, 4, 5}));

  const StateNode* model = sd.find("model");
  ASSERT_TRUE(model && model->is(SK::Dict));
  ASSERT_EQ(model->entries.size(), expected.size());
  for (const auto& [name, node] : model->entries) {
    SCOPED_TRACE(name);
    const nlohmann::json& want = expected.at(name);
    ASSERT_TRUE(node.is(SK::Tensor));
    EXPECT_EQ(torch_scalar_name(node.stored), want.at("dtype").get<std::string>());
    EXPECT_EQ(node.tensor.shape(), want.at("shape").get<Shape>());
    const std::vector<double> values = want.at("values").get<std::vector<double>>();
    ASSERT_EQ(node.tensor.numel(), static_cast<int64_t>(values.size()));
    for (size_t i = 0; i < values.size(); ++i) {
      // fp64 is narrowed to fp32 (Tessera has no fp64); every other type is exact.
      const double w = node.stored == TorchScalar::F64 ? static_cast<float>(values[i]) : values[i];
      ASSERT_EQ(element(node.tensor, static_cast<int64_t>(i)), w) << "element " << i;
    }
  }
  EXPECT_EQ(model->find("decoder.layers.0.self_attention.linear_qkv.weight")->tensor.dtype(), DType::BF16);
  EXPECT_EQ(model->find("half")->tensor.dtype(), DType::F16);
  EXPECT_EQ(model->find("bool")->tensor.dtype(), DType::I32);
  // The one tensor object saved under two names is one Tessera tensor.
  EXPECT_EQ(model->find("output_layer.weight")->tensor.raw(), model->find("embedding.word_embeddings.weight")->tensor.raw());
}

TEST_F(TorchFileTest, ReadsRebuildTensorV3OfAnUntypedStorage) {
  const StateNode sd = load_torch_file(dir_.file("v3.pt"));
  const StateNode* v3 = sd.find("v3");
  ASSERT_TRUE(v3 && v3->is(SK::Tensor));
  EXPECT_EQ(v3->stored, TorchScalar::BF16);
  ASSERT_EQ(v3->tensor.shape(), Shape({2}));
  EXPECT_EQ(bf16_to_fp32(v3->tensor.host_bf16()[0]), 1.0f);  // storage offset 1, in bf16 elements
  EXPECT_EQ(bf16_to_fp32(v3->tensor.host_bf16()[1]), 2.0f);
}

TEST_F(TorchFileTest, MalformedArchivesAreErrorsNamingFileAndEntry) {
  expect_error("short_storage.pt", {"/data/0'", "too short"});
  expect_error("short_view.pt", {"model.w: ", "storage 'archive/data/0' is too short for the view", "reaches element 9 of 4"});
  expect_error("int_storage.pt", {"model.w: ", "tensor's storage is 5"});
  expect_error("repeated.pt", {"model.w: ", "repeats the 4 elements of storage 'archive/data/0' into 1099511627776"});
  expect_error("legacy.pt", {"not a zip archive but a bare pickle", "PyTorch < 1.6"});
  expect_error("missing.pt", {"cannot open"});
}

// Every truncation of a real checkpoint, and corruptions spread over it, are Errors naming the file
// (or read, where a corrupted byte is one no reader checks, such as tensor data): never a crash.
TEST_F(TorchFileTest, TruncatedAndCorruptedCheckpointsAreErrors) {
  const std::string good = testing::read_file_bytes(dir_.file("model_optim_rng.pt"));
  const std::string path = dir_.file("bad.pt");
  const size_t step = std::max<size_t>(1, good.size() / 400);
  for (size_t n = 0; n < good.size(); n += step) {
    testing::write_file_bytes(path, good.substr(0, n));
    try {
      load_torch_file(path);
      ADD_FAILURE() << "truncated to " << n << " bytes and read";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
  // data.pkl sits first in the archive: corrupt each of its first bytes, then bytes spread beyond.
  int refused = 0;
  for (size_t i = 0; i < good.size(); i += i < 4096 ? 1 : 97) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x41);
    testing::write_file_bytes(path, bad);
    try {
      load_torch_file(path);
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace tessera::ckpt
