// Micro-batches from a token dataset, as Megatron's get_batch and get_ltor_masks_and_position_ids:
// inputs are a sample's first seq_length tokens, labels the next ones; with --eod-mask-loss, positions
// whose input is the end-of-document id do not count in the loss; with --reset-position-ids, positions
// restart after every end-of-document id; with --reset-attention-mask, a position attends only to the
// positions of its own document.
#pragma once

#include "data/gpt_dataset.h"
#include "model/language_model.h"

namespace tessera::train {

struct BatchOptions {
  int32_t eod = -1;
  bool eod_mask_loss = false;
  bool reset_position_ids = false;
  bool reset_attention_mask = false;
};

// Samples [first, first + batch) of `data`.
model::MicroBatch make_micro_batch(const data::TokenDataset& data, int64_t first, int64_t batch,
                                   const BatchOptions& options);

}  // namespace tessera::train
