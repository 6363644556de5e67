#include "train/step_context.h"

namespace tessera::train {

double loss_tokens(const model::MicroBatch& batch) {
  const float* mask = batch.loss_mask.host_f32();
  double tokens = 0;
  for (int64_t i = 0; i < batch.loss_mask.numel(); ++i) tokens += mask[i];
  return tokens;
}

double loss_tokens(const std::vector<model::MicroBatch>& batches) {
  double tokens = 0;
  for (const model::MicroBatch& b : batches) tokens += loss_tokens(b);
  return tokens;
}

float gradient_scale(double normaliser) { return normaliser > 0 ? static_cast<float>(1.0 / normaliser) : 0.0f; }

double mean_loss(double sum, double normaliser) { return normaliser > 0 ? sum / normaliser : 0.0; }

double per_sample_loss_weight(double tokens, double samples) { return tokens / samples; }

model::ForwardContext micro_batch_context(uint64_t seed, int64_t completed, bool training, int64_t sample_offset,
                                          int64_t seq, int64_t rows, double per_sample_loss_weight) {
  model::ForwardContext ctx{seed, training ? completed + 1 : completed, sample_offset, training, seq, rows};
  ctx.per_sample_loss_weight = per_sample_loss_weight;
  return ctx;
}

}  // namespace tessera::train
