#include "train/training_data.h"

#include <algorithm>

#include "data/bert_dataset.h"
#include "data/blended_dataset.h"
#include "train/bert_batching.h"
#include "train/mock_data.h"

namespace tessera::train {

namespace {

std::array<std::shared_ptr<const BatchSource>, 3> mock_batches(const TrainArguments& a) {
  std::array<std::shared_ptr<const BatchSource>, 3> sets;
  for (int split = 0; split < 3; ++split)
    if (a.model.family == "bert")
      sets[split] = std::make_shared<MockBertBatches>(a.vocab_size, a.model.seq_length, a.seed, split,
                                                      a.model.bert_binary_head);
    else
      sets[split] = std::make_shared<GptBatches>(
          std::make_shared<MockGptDataset>(a.vocab_size, a.model.seq_length, a.seed, split),
          BatchOptions{a.eod, a.eod_mask_loss, a.reset_position_ids, a.reset_attention_mask});
  return sets;
}

std::array<int64_t, 3> num_samples(const TrainArguments& a) {
  std::array<int64_t, 3> n = data::megatron_num_samples(a.train_iters, a.global_batch_size, a.eval_interval, a.eval_iters);
  // Sample-based training (Megatron: --train-samples itself), and at least what the iterations take: a
  // ramp's last iteration may reach past --train-samples, as Megatron's count of iterations allows.
  if (a.train_samples > 0) n[0] = std::max(a.train_samples, a.batch_schedule.samples_for(a.train_iters));
  return n;
}

std::array<std::shared_ptr<const BatchSource>, 3> bert_batches(const TrainArguments& a) {
  data::BertDataConfig config;
  config.data_path = a.data_path;
  config.split_data_path = a.split_data_path;
  config.split = a.split;
  config.seq_length = a.model.seq_length;
  config.seed = static_cast<uint32_t>(a.seed);
  config.cache_path = a.data_cache_path;
  config.mask_prob = a.mask_prob;
  config.short_seq_prob = a.short_seq_prob;
  config.binary_head = a.model.bert_binary_head;
  config.test_split_optional = true;
  const auto vocab =
      std::make_shared<const data::MaskingVocabulary>(masking_vocabulary(*data::build_tokenizer(tokenizer_options(a))));
  std::array<std::shared_ptr<const BatchSource>, 3> sets;
  const auto datasets = data::build_bert_datasets(config, num_samples(a), vocab);
  for (int split = 0; split < 3; ++split)
    if (datasets[split]) sets[split] = std::make_shared<BertBatches>(datasets[split], config.binary_head);
  return sets;
}

std::array<std::shared_ptr<const BatchSource>, 3> gpt_batches(const TrainArguments& a) {
  data::GptDataConfig config;
  config.data_path = a.data_path;
  config.split_data_path = a.split_data_path;
  config.split = a.split;
  config.seq_length = a.model.seq_length;
  config.seed = static_cast<uint32_t>(a.seed);
  config.cache_path = a.data_cache_path;
  config.vocab_size = a.model.vocab_size;
  config.test_split_optional = true;  // evaluated after training only when it has documents
  const BatchOptions options{a.eod, a.eod_mask_loss, a.reset_position_ids, a.reset_attention_mask};
  std::array<std::shared_ptr<const BatchSource>, 3> sets;
  const auto datasets = data::build_gpt_datasets(config, num_samples(a));
  for (int split = 0; split < 3; ++split)
    if (datasets[split]) sets[split] = std::make_shared<GptBatches>(datasets[split], options);
  return sets;
}

}  // namespace

data::TokenizerOptions tokenizer_options(const TrainArguments& a) {
  return {a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model, a.vocab_size};
}

std::array<std::shared_ptr<const BatchSource>, 3> build_batch_sources(const TrainArguments& a) {
  if (a.mock_data) return mock_batches(a);
  return a.model.family == "bert" ? bert_batches(a) : gpt_batches(a);
}

}  // namespace tessera::train
