#include "model/weight_gradient_store.h"

#include <utility>

namespace tessera::model {
namespace {
thread_local WeightGradientStore* active_weight_gradient_store = nullptr;
}  // namespace

void WeightGradientStore::defer(std::function<void()> weight_gradient, std::initializer_list<Tensor> held) {
  queued_.push_back(std::move(weight_gradient));
  for (const Tensor& t : held)
    if (t.defined()) bytes_ += static_cast<int64_t>(t.nbytes());
}

void WeightGradientStore::run() {
  std::vector<std::function<void()>> queued = std::exchange(queued_, {});
  for (std::function<void()>& w : queued) {
    w();
    w = nullptr;  // its tensors go as soon as it has run
  }
  bytes_ = 0;
}

WeightGradientStore* deferred_weight_gradients() { return active_weight_gradient_store; }

DeferWeightGradients::DeferWeightGradients(WeightGradientStore* store) : previous_(active_weight_gradient_store) {
  active_weight_gradient_store = store;
}

DeferWeightGradients::~DeferWeightGradients() { active_weight_gradient_store = previous_; }

}  // namespace tessera::model
