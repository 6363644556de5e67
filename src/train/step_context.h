// What every forward and backward of a step is given, written once for the trainer's schedule, Ouroboros
// and fine-tuning (tasks/finetune.cc): the objective's normaliser (the loss tokens), the gradient scale and
// the mean loss it gives, and each micro-batch's model::ForwardContext.
#pragma once

#include <cstdint>
#include <vector>

#include "model/language_model.h"

namespace tessera::train {

// The loss tokens of a micro-batch (its loss mask's sum; a host tensor), and of several.
double loss_tokens(const model::MicroBatch& batch);
double loss_tokens(const std::vector<model::MicroBatch>& batches);

// The objective is the mean loss over the normaliser (the global batch's loss tokens, over every
// data-parallel rank; a fine-tuning task's questions): every micro-batch's gradient is scaled by
// 1 / normaliser, so that the sum over micro-batches and ranks is the gradient of the mean whatever the
// split. 0 when there is nothing to average over.
float gradient_scale(double normaliser);
// The mean of a loss sum over the normaliser (0 when there is nothing to average over).
double mean_loss(double sum, double normaliser);
// The global batch's loss tokens per sample (model::ForwardContext::per_sample_loss_weight).
double per_sample_loss_weight(double tokens, double samples);

// The ForwardContext of a micro-batch of `rows` samples of `seq` tokens whose first is sample
// `sample_offset` (dropout keys). In training dropout is keyed by the iteration being run, `completed` + 1
// (Megatron counts from 1); an evaluation by the iteration the weights are at, `completed`.
model::ForwardContext micro_batch_context(uint64_t seed, int64_t completed, bool training, int64_t sample_offset,
                                          int64_t seq, int64_t rows, double per_sample_loss_weight = 1.0);

}  // namespace tessera::train
