#include "ckpt/dcp_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "ckpt/dcp_reader.h"
#include "ckpt/torch_save.h"
#include "core/testing.h"

namespace tessera::ckpt {
namespace {

using ::tessera::testing::error_of;

std::string scratch(const char* name) {
  const std::string dir = (std::filesystem::temp_directory_path() / str_cat("dcp_writer_test.", name, ".", ::getpid())).string();
  std::filesystem::remove_all(dir);
  return dir;
}

Tensor arange(const Shape& shape, float from) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.host_f32()[i] = from + static_cast<float>(i);
  return t;
}

// What the writer writes, Tessera's DCP reader reads (PyTorch's own reader: tests/megatron_dist_save_cli.sh): a
// stacked key in chunks from two ranks' files, a bf16 one, and a ShardedObject.
TEST(DcpWriter, ReadBackByTheReader) {
  const std::string dir = scratch("read_back");
  {
    DcpWriter w(dir);
    // [2 layers, 4, 3]: layer 0 by rank 0 in two row halves, layer 1 whole by rank 1.
    w.add_tensor("decoder.layers.w", {2, 4, 3}, {0, 0, 0}, arange({1, 2, 3}, 0), DType::F32, 0);
    w.add_tensor("decoder.layers.w", {2, 4, 3}, {0, 2, 0}, arange({1, 2, 3}, 6), DType::F32, 0);
    w.add_tensor("decoder.layers.w", {2, 4, 3}, {1, 0, 0}, arange({1, 4, 3}, 12), DType::F32, 1);
    w.add_tensor("embedding.word_embeddings.weight", {2, 2}, {0, 0}, arange({2, 2}, 1), DType::BF16, 1);
    TorchSaveWriter object;
    w.add_object("rng_state/shard_0.0_1.1", object.bytes(PickleOut::list({PickleOut::int_of(42)})), 0);
    w.finish();
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/__0_0.distcp") && std::filesystem::exists(dir + "/__1_0.distcp"));
  const DcpCheckpoint ck = DcpCheckpoint::open(dir);
  const DcpEntry* stacked = ck.find("decoder.layers.w");
  ASSERT_NE(stacked, nullptr);
  EXPECT_EQ(stacked->size, (Shape{2, 4, 3}));
  EXPECT_EQ(stacked->chunks.size(), 3u);
  const Tensor all = ck.read(*stacked);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(all.host_f32()[i], static_cast<float>(i)) << i;
  const DcpEntry* emb = ck.find("embedding.word_embeddings.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(ck.read(*emb).dtype(), DType::BF16);
  const DcpEntry* rng = ck.find("rng_state/shard_0.0_1.1");
  ASSERT_NE(rng, nullptr);
  EXPECT_FALSE(rng->tensor);
  const StateNode obj = ck.read_object(*rng);
  ASSERT_EQ(obj.items.size(), 1u);
  EXPECT_EQ(obj.items[0].integer, 42);
  std::filesystem::remove_all(dir);
}

TEST(DcpWriter, RefusesAChunkOutsideItsTensor) {
  const std::string dir = scratch("outside");
  DcpWriter w(dir);
  EXPECT_NE(error_of([&] { w.add_tensor("k", {2, 3}, {1, 0}, arange({2, 3}, 0), DType::F32, 0); })
                .find("k's chunk [2, 3] at [1, 0] is outside [2, 3]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { w.add_tensor("k", {2, 3}, {0, 0}, arange({1, 3}, 0), DType::F32, 0);
                           w.add_tensor("k", {4, 3}, {2, 0}, arange({1, 3}, 0), DType::F32, 0); })
                .find("k is added with two global sizes or dtypes"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::ckpt
