// The writers (zip_writer, pickle_writer, torch_save) read back by this project's readers, and, where
// Debian's python3-torch is installed, by torch.load itself.
#include "ckpt/torch_save.h"

#include <gtest/gtest.h>

#include "ckpt/pickle_reader.h"
#include "ckpt/python_fixture_testing.h"
#include "ckpt/torch_file.h"
#include "ckpt/zip_reader.h"
#include "ckpt/zip_writer.h"

namespace tessera::ckpt {
namespace {

using testing::FixtureDir;

Tensor ramp(const Shape& shape, float scale) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.host_f32()[i] = scale * static_cast<float>(i) - 1.5f;
  return t;
}

TEST(ZipWriterTest, StoredEntriesAlignedAndCrcOfZlib) {
  EXPECT_EQ(zip_crc32("123456789", 9), 0xCBF43926u);  // the CRC-32 check value
  FixtureDir dir;
  ZipWriter z(dir.file("a.zip"));
  z.add("archive/data.pkl", std::string("\x80\x02K\x07.", 5));
  z.add("archive/data/0", std::string(1000, 'x'));
  z.add("archive/empty", std::string());
  z.commit();
  const ZipReader r = ZipReader::open(dir.file("a.zip"));
  ASSERT_EQ(r.entries().size(), 3u);
  EXPECT_EQ(r.read_all(r.entry("archive/data/0")), std::string(1000, 'x'));
  EXPECT_EQ(r.read_all(r.entry("archive/empty")), "");
  for (const ZipEntry& e : r.entries()) {
    EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
    EXPECT_EQ(e.crc32, zip_crc32(r.read_all(e).data(), e.size)) << e.name;
  }
}

TEST(ZipWriterTest, Zip64RecordsReadBack) {
  FixtureDir dir;
  ZipWriter z(dir.file("a.zip"));
  z.zip64_threshold = 0;  // every size and offset through the zip64 fields, as past 4 GiB
  z.add("archive/a", std::string("first"));
  z.add("archive/b", std::string(300, 'b'));
  z.commit();
  const ZipReader r = ZipReader::open(dir.file("a.zip"));
  EXPECT_EQ(r.read_all(r.entry("archive/a")), "first");
  EXPECT_EQ(r.read_all(r.entry("archive/b")), std::string(300, 'b'));
  const std::string py = testing::find_python("");
  if (py.empty()) return;
  // Python's zipfile checks the zip64 records and the CRCs.
  ASSERT_TRUE(dir.run_python(py, "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1] + '/a.zip')\n"
                                 "assert z.testzip() is None\nassert z.read('archive/a') == b'first'\n"));
}

TEST(ZipWriterTest, NothingLeftWithoutCommit) {
  FixtureDir dir;
  {
    ZipWriter z(dir.file("a.zip"));
    z.add("archive/a", std::string("x"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.zip")));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(std::filesystem::path(dir.file("a.zip")).parent_path()),
                          std::filesystem::directory_iterator()),
            0);
}

TEST(PickleWriterTest, ValuesReadBack) {
  PickleOut d = PickleOut::dict();
  d.set("none", PickleOut::none())
      .set("t", PickleOut::boolean_of(true))
      .set("small", PickleOut::int_of(7))
      .set("two", PickleOut::int_of(60000))
      .set("neg", PickleOut::int_of(-5))
      .set("big", PickleOut::int_of(int64_t{1} << 40))
      .set("bigneg", PickleOut::int_of(-(int64_t{1} << 40) - 3))
      .set("x", PickleOut::float_of(0.1))
      .set("s", PickleOut::str("héllo"))
      .set("tup", PickleOut::tuple({PickleOut::int_of(1), PickleOut::int_of(2), PickleOut::int_of(3), PickleOut::int_of(4)}))
      .set("list", PickleOut::list({PickleOut::str("a"), PickleOut::int_of(128)}))
      .set("cls", PickleOut::global("torch", "bfloat16"));
  PickleOut od = PickleOut::dict(PickleOut::Kind::OrderedDict);
  od.set("b", PickleOut::int_of(2)).set("a", PickleOut::int_of(1));
  d.set("od", od);
  const Pickle p = parse_pickle(write_pickle(d), "test");
  const PyValue& r = p.root();
  ASSERT_TRUE(r.is(PyValue::Kind::Dict));
  EXPECT_TRUE(r.get("none")->is(PyValue::Kind::None));
  EXPECT_TRUE(r.get("t")->boolean);
  EXPECT_EQ(r.get("small")->integer, 7);
  EXPECT_EQ(r.get("two")->integer, 60000);
  EXPECT_EQ(r.get("neg")->integer, -5);
  EXPECT_EQ(r.get("big")->integer, int64_t{1} << 40);
  EXPECT_EQ(r.get("bigneg")->integer, -(int64_t{1} << 40) - 3);
  EXPECT_EQ(r.get("x")->real, 0.1);
  EXPECT_EQ(r.get("s")->text, "héllo");
  EXPECT_EQ(r.get("tup")->items.size(), 4u);
  EXPECT_EQ(r.get("list")->items[1]->integer, 128);
  EXPECT_EQ(r.get("cls")->text, "torch.bfloat16");
  const PyValue* o = r.get("od");
  ASSERT_TRUE(o->is(PyValue::Kind::Dict));  // the reader makes an OrderedDict a Dict
  ASSERT_EQ(o->entries.size(), 2u);
  EXPECT_EQ(o->entries[0].first->text, "b");
}

// A Megatron-shaped file: tensors of three stored types, a Namespace, a nested OrderedDict.
PickleOut sample_checkpoint(TorchSaveWriter& w) {
  PickleOut model = PickleOut::dict(PickleOut::Kind::OrderedDict);
  model.set("w32", w.tensor(ramp({3, 4}, 0.25f), DType::F32))
      .set("w16", w.tensor(ramp({5}, 0.5f), DType::BF16))
      .set("h16", w.tensor(ramp({2, 2}, 1.0f), DType::F16));
  PickleOut args = PickleOut::dict(PickleOut::Kind::Namespace);
  args.set("num_layers", PickleOut::int_of(2)).set("params_dtype", torch_dtype_value(DType::BF16))
      .set("norm_epsilon", PickleOut::float_of(1e-5)).set("swiglu", PickleOut::boolean_of(true));
  PickleOut root = PickleOut::dict();
  root.set("args", args).set("checkpoint_version", PickleOut::float_of(3.0)).set("iteration", PickleOut::int_of(20))
      .set("model", model);
  return root;
}

TEST(TorchSaveTest, ReadsBackWithTorchFile) {
  FixtureDir dir;
  TorchSaveWriter w;
  w.write(dir.file("m.pt"), sample_checkpoint(w));
  const StateNode root = load_torch_file(dir.file("m.pt"));
  EXPECT_EQ(root.find("iteration")->integer, 20);
  EXPECT_EQ(root.find("checkpoint_version")->real, 3.0);
  const StateNode* args = root.find("args");
  ASSERT_TRUE(args && args->is(StateNode::Kind::Object));
  EXPECT_EQ(args->find("num_layers")->integer, 2);
  EXPECT_TRUE(args->find("swiglu")->boolean);
  const StateNode* model = root.find("model");
  ASSERT_TRUE(model);
  const Tensor w32 = model->find("w32")->tensor;
  ASSERT_EQ(w32.shape(), (Shape{3, 4}));
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(w32.host_f32()[i], ramp({3, 4}, 0.25f).host_f32()[i]);
  EXPECT_EQ(model->find("w16")->stored, TorchScalar::BF16);
  EXPECT_EQ(model->find("h16")->stored, TorchScalar::F16);
  const Tensor w16 = model->find("w16")->tensor;
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(bf16_to_fp32(static_cast<const uint16_t*>(w16.host_raw())[i]), 0.5f * i - 1.5f);
}

TEST(TorchSaveTest, TorchLoadReadsIt) {
  const std::string py = testing::find_python("torch");
  if (py.empty()) GTEST_SKIP() << "no python3 with torch (Debian's python3-torch)";
  FixtureDir dir;
  TorchSaveWriter w;
  w.write(dir.file("m.pt"), sample_checkpoint(w));
  ASSERT_TRUE(dir.run_python(py, R"(
import sys, argparse, collections, torch
d = torch.load(sys.argv[1] + '/m.pt', map_location='cpu')
assert d['iteration'] == 20 and d['checkpoint_version'] == 3.0
a = d['args']
assert isinstance(a, argparse.Namespace) and a.num_layers == 2 and a.swiglu is True, a
assert a.params_dtype == torch.bfloat16 and a.norm_epsilon == 1e-5
m = d['model']
assert isinstance(m, collections.OrderedDict) and list(m) == ['w32', 'w16', 'h16'], list(m)
assert m['w32'].dtype == torch.float32 and m['w32'].shape == (3, 4)
assert torch.equal(m['w32'], torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.25 - 1.5)
assert m['w16'].dtype == torch.bfloat16 and torch.equal(m['w16'].float(), torch.arange(5.) * 0.5 - 1.5)
assert m['h16'].dtype == torch.float16 and torch.equal(m['h16'].float(), (torch.arange(4.) - 1.5).reshape(2, 2))
)"));
}

}  // namespace
}  // namespace tessera::ckpt
