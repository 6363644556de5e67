// Zero-bubble pipelines (pipeline/zero_bubble.h) split each chunk's backward into B, the gradient of its
// input, and W, the gradients of its weights, run later. While a DeferWeightGradients scope is active on
// this thread, the layers whose weight gradients are GEMMs (the tensor-parallel linear layers, the output
// layer, the grouped experts) compute their input gradient at once and queue the weight-gradient GEMM, with
// the tensors it reads, in the scope's store; running the store later is the W pass. The small weight
// gradients (norms, biases of the router, embeddings, the router) stay in B. Each queued GEMM does exactly
// what the unsplit backward would have done, into the same gradient buffers, so the gradients equal the
// unsplit run's as long as each parameter's W passes run in its micro-batches' order (the schedules do).
// The Megatron fork of the paper keeps the same queue (its WeightGradStore).
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include "core/tensor.h"

namespace tessera::model {

class WeightGradientStore {
 public:
  // `held`: the activations the GEMM reads (the layer's input and output gradient), which stay alive
  // from B to W; their bytes count in bytes() until the store runs, since the activation record they came
  // from is gone after B and the trainer's activation accounting would otherwise lose them.
  void defer(std::function<void()> weight_gradient, std::initializer_list<Tensor> held = {});
  // Runs the queued weight gradients in the order they were queued and forgets them (and their tensors).
  void run();
  bool empty() const { return queued_.empty(); }
  // The bytes of the `held` tensors of the queued passes (each counted as its own allocation, as the
  // activation records count theirs).
  int64_t bytes() const { return bytes_; }

 private:
  std::vector<std::function<void()>> queued_;
  int64_t bytes_ = 0;
};

// The store of the innermost active scope on this thread, or null: compute weight gradients at once.
WeightGradientStore* deferred_weight_gradients();

// Makes `store` the thread's store for its lifetime (null: none, e.g. inside a scope).
class DeferWeightGradients {
 public:
  explicit DeferWeightGradients(WeightGradientStore* store);
  ~DeferWeightGradients();
  DeferWeightGradients(const DeferWeightGradients&) = delete;
  DeferWeightGradients& operator=(const DeferWeightGradients&) = delete;

 private:
  WeightGradientStore* previous_;
};

}  // namespace tessera::model
