#include "ckpt/dcp_reader.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt/python_fixture_testing.h"
#include "core/dtype.h"
#include "core/testing.h"

namespace tessera::ckpt {
namespace {

using testing::FixtureDir;
using ::tessera::testing::error_of;

// PyTorch's DCP writer in one process (torch.distributed.checkpoint in 2.x, torch.distributed._shard.
// checkpoint in 1.13; Python 3.11 imports 1.13's only when its dataclasses may hash by identity), one
// file per item, then copies of it made into what other writers or damage leave: "raw" with the bf16
// item rewritten as its bare bytes (and .metadata pointing at them), the expected values beside.
const char* kDcpScript = R"(
import sys, dataclasses, pickle, shutil, os, json
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
d = sys.argv[1]
sd = {'decoder.layers.mlp.linear_fc1.weight': torch.arange(24.).reshape(2, 3, 4),
      'embedding.word_embeddings.weight': (torch.arange(40.).reshape(5, 8) / 8).to(torch.bfloat16),
      'steps': torch.arange(-3, 3, dtype=torch.int64), 'iteration': 7}
save(sd, storage_writer=dcp.FileSystemWriter(d + '/dcp'), no_dist=True)
# The bf16 item as raw bytes at the end of its file.
shutil.copytree(d + '/dcp', d + '/raw')
md = pickle.load(open(d + '/raw/.metadata', 'rb'))
for index, info in md.storage_data.items():
    if index.fqn == 'embedding.word_embeddings.weight':
        raw = sd[index.fqn].view(torch.int16).numpy().tobytes()
        path = d + '/raw/' + info.relative_path
        info.offset = os.path.getsize(path)
        info.length = len(raw)
        open(path, 'ab').write(raw)
pickle.dump(md, open(d + '/raw/.metadata', 'wb'))
)";

class DcpReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    py_ = testing::find_python("torch");
    if (py_.empty()) GTEST_SKIP() << "no python3 with torch (Debian's python3-torch) to write a DCP checkpoint";
    ASSERT_TRUE(dir_.run_python(py_, kDcpScript));
  }
  std::string py_;
  FixtureDir dir_;
};

void expect_checkpoint(const DcpCheckpoint& ck) {
  const DcpEntry* fc1 = ck.find("decoder.layers.mlp.linear_fc1.weight");
  ASSERT_NE(fc1, nullptr);
  EXPECT_TRUE(fc1->tensor);
  EXPECT_EQ(fc1->dtype, TorchScalar::F32);
  EXPECT_EQ(fc1->size, (Shape{2, 3, 4}));
  ASSERT_EQ(fc1->chunks.size(), 1u);
  const Tensor whole = ck.read(*fc1);
  ASSERT_EQ(whole.shape(), (Shape{2, 3, 4}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(whole.host_f32()[i], static_cast<float>(i));
  const Tensor layer1 = ck.read(*fc1, 1, 1);  // one layer of a stacked tensor
  ASSERT_EQ(layer1.shape(), (Shape{1, 3, 4}));
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(layer1.host_f32()[i], static_cast<float>(12 + i));

  const DcpEntry* emb = ck.find("embedding.word_embeddings.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, TorchScalar::BF16);
  const Tensor e = ck.read(*emb, 2, 3);
  ASSERT_EQ(e.dtype(), DType::BF16);
  ASSERT_EQ(e.shape(), (Shape{3, 8}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(bf16_to_fp32(e.host_bf16()[i]), static_cast<float>(16 + i) / 8) << i;

  const DcpEntry* steps = ck.find("steps");
  ASSERT_NE(steps, nullptr);
  const Tensor s = ck.read(*steps);
  ASSERT_EQ(s.dtype(), DType::I64);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(s.host_i64()[i], i - 3);

  const DcpEntry* it = ck.find("iteration");
  ASSERT_NE(it, nullptr);
  EXPECT_FALSE(it->tensor);
  const StateNode v = ck.read_object(*it);
  ASSERT_TRUE(v.is(StateNode::Kind::Int));
  EXPECT_EQ(v.integer, 7);
  EXPECT_EQ(ck.find("absent"), nullptr);
}

// One test, one run of PyTorch (the fixture takes seconds): what the writer wrote, the raw-bytes item, then
// the damage, each named with the file and key.
TEST_F(DcpReaderTest, ReadsPyTorchsWriterAndNamesDamage) {
  {
    SCOPED_TRACE("as PyTorch's FileSystemWriter wrote it");
    expect_checkpoint(DcpCheckpoint::open(dir_.file("dcp")));
  }
  {
    SCOPED_TRACE("an item stored as raw bytes");
    expect_checkpoint(DcpCheckpoint::open(dir_.file("raw")));
  }
  namespace fs = std::filesystem;
  const std::string metadata = testing::read_file_bytes(dir_.file("dcp/.metadata"));
  // A truncated .metadata: the pickle machine's error names the file.
  testing::write_file_bytes(dir_.file("dcp/.metadata"), metadata.substr(0, metadata.size() / 2));
  EXPECT_EQ(error_of([&] { DcpCheckpoint::open(dir_.file("dcp")); }).rfind(dir_.file("dcp/.metadata") + ": byte ", 0), 0u)
      << error_of([&] { DcpCheckpoint::open(dir_.file("dcp")); });
  // Every single-byte corruption is an Error (or, where it lands in a value, a checkpoint that opens).
  for (size_t i = 0; i < metadata.size(); ++i) {
    std::string bad = metadata;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    testing::write_file_bytes(dir_.file("dcp/.metadata"), bad);
    try {
      DcpCheckpoint::open(dir_.file("dcp"));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(dir_.file("dcp")), std::string::npos) << e.what();
    }
  }
  testing::write_file_bytes(dir_.file("dcp/.metadata"), metadata);

  // An item past its file's end: the file, the key and the bytes.
  const DcpCheckpoint ck = DcpCheckpoint::open(dir_.file("dcp"));
  const DcpChunk chunk = ck.find("decoder.layers.mlp.linear_fc1.weight")->chunks[0];
  const std::string data = dir_.file("dcp/" + chunk.file);
  const std::string bytes = testing::read_file_bytes(data);
  testing::write_file_bytes(data, bytes.substr(0, chunk.offset + chunk.length - 10));
  const std::string past = error_of([&] { DcpCheckpoint::open(dir_.file("dcp")); });
  EXPECT_NE(past.find(data + ": item 'decoder.layers.mlp.linear_fc1.weight' (chunk at offsets [0, 0, 0]): bytes ["),
            std::string::npos)
      << past;
  EXPECT_NE(past.find("run past the end of the file"), std::string::npos) << past;

  // A damaged archive inside the item: the reader that opened before the damage names the item.
  std::string zeroed = bytes;
  const auto item_end = zeroed.begin() + static_cast<std::ptrdiff_t>(chunk.offset + chunk.length);
  std::fill(item_end - 60, item_end, '\0');  // the item's archive's end records
  testing::write_file_bytes(data, zeroed);
  const std::string damaged = error_of([&] { ck.read(*ck.find("decoder.layers.mlp.linear_fc1.weight")); });
  EXPECT_EQ(damaged.rfind(data + ": item 'decoder.layers.mlp.linear_fc1.weight' (chunk at offsets [0, 0, 0]), bytes [", 0),
            0u)
      << damaged;
  fs::remove(dir_.file("dcp/.metadata"));
  EXPECT_NE(error_of([&] { DcpCheckpoint::open(dir_.file("dcp")); }).find("is not a PyTorch DCP checkpoint"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::ckpt
