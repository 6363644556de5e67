// The building blocks a transformer is made of: a linear layer and a norm, each owning its parameters
// in the ParameterSet and running explicit forward and backward through the kernels.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/parameters.h"

namespace tessera::model {

// What varies between micro-batches and iterations: dropout keys and whether to drop at all.
struct ForwardContext {
  uint64_t seed = 0;
  int64_t iteration = 0;
  int64_t sample_offset = 0;  // global index of the micro-batch's first sample (keys dropout)
  bool training = true;
  int64_t seq = 0, batch = 0;
};

// Dropout stream of one site (embedding, attention probabilities, attention output, MLP output) of one
// layer at one iteration.
uint64_t dropout_stream(int64_t iteration, int64_t layer_number, int site);

class Linear {
 public:
  Linear(ParameterSet& params, const std::string& prefix, int64_t in, int64_t out, bool bias, float init_std);
  // x [rows, in] -> y [rows, out] (allocated here).
  Tensor forward(const Tensor& x) const;
  // Accumulates weight/bias gradients; returns dx [rows, in] unless want_dx is false.
  Tensor backward(const Tensor& dy, const Tensor& x, bool want_dx = true) const;
  const Parameter& weight() const { return *weight_; }

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  int64_t in_, out_;
};

class Norm {
 public:
  Norm(ParameterSet& params, const std::string& prefix, const GptConfig& config);
  // y, mean (LayerNorm only) and rstd are allocated here.
  void forward(const Tensor& x, Tensor& y, Tensor& mean, Tensor& rstd) const;
  // Adds the input gradient into dx.
  void backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& dx) const;

 private:
  Normalization kind_;
  float eps_;
  int64_t hidden_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

}  // namespace tessera::model
