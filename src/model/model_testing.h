// Helpers for the model tests: a random micro-batch and the forward context they run under.
#pragma once

#include "core/philox.h"
#include "model/language_model.h"

namespace tessera::model::testing {

// batch samples of random tokens and labels, every fifth position left out of the loss.
inline MicroBatch random_batch(const ModelConfig& c, int64_t batch, uint64_t seed) {
  MicroBatch mb;
  mb.tokens = Tensor::empty({batch, c.seq_length}, DType::I32);
  mb.labels = Tensor::empty({batch, c.seq_length}, DType::I32);
  mb.loss_mask = Tensor::empty({batch, c.seq_length});
  PhiloxStream s(seed, 1);
  for (int64_t i = 0; i < mb.tokens.numel(); ++i) {
    mb.tokens.i32()[i] = static_cast<int32_t>(s.bits(2 * i) % c.vocab_size);
    mb.labels.i32()[i] = static_cast<int32_t>(s.bits(2 * i + 1) % c.vocab_size);
    mb.loss_mask.f32()[i] = (i % 5 == 3) ? 0.0f : 1.0f;  // some masked tokens
  }
  return mb;
}

// Dropout keyed at iteration 3 of seed 7, from sample 10.
inline ForwardContext context(const ModelConfig& c, int64_t batch, bool training) {
  ForwardContext ctx;
  ctx.seed = 7;
  ctx.iteration = 3;
  ctx.sample_offset = 10;
  ctx.training = training;
  ctx.seq = c.seq_length;
  ctx.batch = batch;
  return ctx;
}

}  // namespace tessera::model::testing
