// The W passes' memory (model/weight_gradient_store.h): a linear layer's backward under a
// DeferWeightGradients scope queues its weight gradient holding the layer's input and output gradient,
// the store counts exactly the bytes the allocator frees when the passes run (TensorMemory, the
// allocator's own count), and the deferred gradients equal the unsplit backward's.
#include "model/weight_gradient_store.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "model/modules.h"
#include "parallel/tensor_parallel.h"

namespace tessera::model {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(rng);
  return t;
}

std::vector<float> values(const Tensor& t) { return std::vector<float>(t.f32(), t.f32() + t.numel()); }

TEST(WeightGradientStore, CountsWhatTheWPassesHoldAndFreesItWhenTheyRun) {
  const auto& tp = parallel::TensorParallelContext::single_process();
  ParameterSet params;
  ColumnParallelLinear fc1(params, "fc1", 16, {24}, 0, true, 0.1f, tp);
  RowParallelLinear fc2(params, "fc2", 24, 16, true, 0.1f, tp);
  params.allocate(7);
  const int64_t rows = 10;

  // The unsplit backward: the reference gradients.
  params.zero_grad();
  {
    Tensor x = random_tensor({rows, 16}, 1), h = random_tensor({rows, 24}, 2), dy = random_tensor({rows, 16}, 3);
    fc1.backward(fc2.backward(dy, h), x);
  }
  const std::vector<float> want = values(params.grads());

  params.zero_grad();
  WeightGradientStore store;
  int64_t expected = 0;
  {
    Tensor x = random_tensor({rows, 16}, 1), h = random_tensor({rows, 24}, 2), dy = random_tensor({rows, 16}, 3);
    DeferWeightGradients defer(&store);
    Tensor dh = fc2.backward(dy, h);
    fc1.backward(dh, x);
    // fc2's W reads dy and h, fc1's dh and x: all four stay alive until W.
    expected = static_cast<int64_t>(dy.nbytes() + h.nbytes() + dh.nbytes() + x.nbytes());
  }
  EXPECT_EQ(store.bytes(), expected);
  EXPECT_EQ(values(params.grads()), std::vector<float>(want.size(), 0.0f)) << "B alone must leave the weights' gradients";
  const int64_t live_before = TensorMemory::live_bytes();
  store.run();
  EXPECT_EQ(live_before - TensorMemory::live_bytes(), expected) << "the bytes the store counted are the bytes W freed";
  EXPECT_EQ(store.bytes(), 0);
  EXPECT_TRUE(store.empty());
  EXPECT_EQ(values(params.grads()), want);
}

TEST(WeightGradientStore, UndefinedTensorsCountNothing) {
  WeightGradientStore store;
  int runs = 0;
  Tensor t = Tensor::empty({3, 5});
  store.defer([&] { ++runs; }, {Tensor(), t});
  store.defer([&] { ++runs; });
  EXPECT_EQ(store.bytes(), static_cast<int64_t>(t.nbytes()));
  store.run();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(store.bytes(), 0);
}

}  // namespace
}  // namespace tessera::model
