// Micro-batches from a token dataset, as Megatron's get_batch and get_ltor_masks_and_position_ids:
// inputs are a sample's first seq_length tokens, labels the next ones; with --eod-mask-loss, positions
// whose input is the end-of-document id do not count in the loss; with --reset-position-ids, positions
// restart after every end-of-document id; with --reset-attention-mask, a position attends only to the
// positions of its own document.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// One sample as Megatron's dataset (GPTDataset, BERTMaskedWordPieceDataset) returns it from __getitem__:
// its fields under Megatron's names, in Megatron's order. `tessera samples` prints these.
struct SampleField {
  std::string name;
  std::vector<int64_t> values;  // one per position, or the one value of a scalar
  bool scalar = false;
};
using MegatronSample = std::vector<SampleField>;

// Where the trainer's micro-batches come from: one split (train, validation or test) of a dataset of
// some model family's samples.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t size() const = 0;  // samples
  // Samples [first, first + batch).
  virtual model::MicroBatch micro_batch(int64_t first, int64_t batch) const = 0;
  // Sample `index`, with Megatron's field names.
  virtual MegatronSample megatron_sample(int64_t index) const = 0;
  // Whether the labels are the next tokens of running text, so that the bytes they stand for can be
  // counted (the validation line's bits per byte): GPT's, not BERT's masked words.
  virtual bool labels_are_text() const { return false; }
};

// GPTDataset's fields of the one sample of `mb`: tokens, labels, loss_mask, position_ids.
MegatronSample gpt_megatron_sample(const model::MicroBatch& mb);

// GPT's samples: make_micro_batch over a token dataset.
class GptBatches final : public BatchSource {
 public:
  GptBatches(std::shared_ptr<const data::TokenDataset> data, const BatchOptions& options)
      : data_(std::move(data)), options_(options) {}
  int64_t size() const override { return data_->size(); }
  model::MicroBatch micro_batch(int64_t first, int64_t batch) const override {
    return make_micro_batch(*data_, first, batch, options_);
  }
  MegatronSample megatron_sample(int64_t index) const override {
    return gpt_megatron_sample(make_micro_batch(*data_, index, 1, options_));
  }
  bool labels_are_text() const override { return true; }

 private:
  std::shared_ptr<const data::TokenDataset> data_;
  BatchOptions options_;
};

}  // namespace tessera::train
