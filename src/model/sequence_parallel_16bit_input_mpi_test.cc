// A column-parallel linear layer handed a 16-bit input (a pre-LN norm's output, which a GPU keeps in bf16
// from forward to backward): under sequence parallelism its rows are gathered over the tensor group,
// which ProcessGroup does in fp32 only, so the layer widens the input for the gather
// (model/modules.cc). Forward and backward from a bf16 input give the bits they give from the same
// values in fp32 (rounded to bf16, marked so), with and without sequence parallelism, at tp = the world
// size. Run on the CPU, whose linear layers widen a 16-bit input the same way (kernels/linear.cc).
#include <gtest/gtest.h>

#include <cstring>

#include "comm/mpi_test_main.h"
#include "core/testing.h"
#include "kernels/precision.h"
#include "model/modules.h"

namespace tessera::model {
namespace {

constexpr int64_t kIn = 12, kOutPerRank = 5, kRowsPerRank = 3;

struct Result {
  Tensor y, dx, grads;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

Tensor host_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32, Device::cpu());
  const auto v = tessera::testing::random_vector(static_cast<size_t>(t.numel()), seed);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

// This rank's rows of x (its sequence shard, or every row without sequence parallelism) through the
// layer and back, with dy this rank's output columns of every row.
Result run(const parallel::TensorParallelContext& tp, const Tensor& x) {
  ParameterSet params;
  const ColumnParallelLinear fc(params, "fc", kIn, Shape{kOutPerRank * tp.size()}, 0, true, 0.5f, tp, DType::BF16);
  params.allocate(7);
  params.cache_rounded_weights(DType::BF16);
  const int64_t rows = kRowsPerRank * tp.size();
  Result r;
  r.y = fc.forward(x, true);
  const Tensor dy = host_tensor({rows, kOutPerRank}, 100 + static_cast<uint64_t>(tp.rank()));
  r.dx = fc.backward(dy, x, true);
  r.grads = params.grads().clone();
  return r;
}

TEST(SequenceParallel16BitInput, ALinearLayerGathersAndMultipliesA16BitInputAsItsFp32Values) {
  auto world = comm::make_mpi_world_group();
  for (bool sequence_parallel : {true, false}) {
    SCOPED_TRACE(str_cat("tp ", world->size(), " sequence parallel ", sequence_parallel));
    const parallel::TensorParallelContext tp{world.get(), sequence_parallel};
    const int64_t rows = sequence_parallel ? kRowsPerRank : kRowsPerRank * tp.size();
    const Tensor x = host_tensor({rows, kIn}, 1 + static_cast<uint64_t>(sequence_parallel ? tp.rank() : 0));
    Tensor rounded = Tensor::empty(x.shape(), DType::F32, Device::cpu());
    kernels::round_to(DType::BF16, x, rounded);
    const Result fp32 = run(tp, rounded);
    const Result sixteen = run(tp, kernels::store_as(DType::BF16, x));
    EXPECT_TRUE(same_bits(sixteen.y, fp32.y));
    EXPECT_TRUE(same_bits(sixteen.dx, fp32.dx));
    EXPECT_TRUE(same_bits(sixteen.grads, fp32.grads));
  }
}

}  // namespace
}  // namespace tessera::model
