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
#include <vector>

namespace tessera::model {

class WeightGradientStore {
 public:
  void defer(std::function<void()> weight_gradient) { queued_.push_back(std::move(weight_gradient)); }
  // Runs the queued weight gradients in the order they were queued and forgets them (and their tensors).
  void run();
  bool empty() const { return queued_.empty(); }

 private:
  std::vector<std::function<void()>> queued_;
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
