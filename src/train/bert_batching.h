// Micro-batches of BERT samples (data/bert_dataset.h), as Megatron's pretrain_bert get_batch: tokens,
// token types, the masked-LM labels and loss mask, the padding mask and the sentence-order label.
#pragma once

#include <memory>

#include "data/bert_dataset.h"
#include "data/tokenizer.h"
#include "train/batching.h"

namespace tessera::train {

// BERTMaskedWordPieceDataset's fields: text, types, labels (-1 where not predicted), is_random,
// padding_mask, loss_mask, truncated.
MegatronSample bert_megatron_sample(const data::BertSample& s);
// The same fields of the one sample of a BERT micro-batch (mock data; never truncated).
MegatronSample bert_megatron_sample(const model::MicroBatch& mb);

class BertBatches final : public BatchSource {
 public:
  BertBatches(std::shared_ptr<const data::MaskedLmDataset> data, bool binary_head)
      : data_(std::move(data)), binary_head_(binary_head) {}
  int64_t size() const override { return data_->size(); }
  // Labels are the original ids at masked positions and 0 elsewhere (Megatron's -1, which the loss mask
  // excludes anyway); the padding mask is 1 on tokens.
  model::MicroBatch micro_batch(int64_t first, int64_t batch) const override;
  MegatronSample megatron_sample(int64_t index) const override { return bert_megatron_sample(data_->get(index)); }

 private:
  std::shared_ptr<const data::MaskedLmDataset> data_;
  bool binary_head_;
};

// The masking vocabulary of a tokenizer with BERT's special ids; an Error naming the tokenizer when it
// has none (--tokenizer-type BertWordPieceLowerCase or BertWordPieceCase have them).
data::MaskingVocabulary masking_vocabulary(const data::Tokenizer& tokenizer);

}  // namespace tessera::train
