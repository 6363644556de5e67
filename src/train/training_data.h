// The samples a training run consumes, built from its flags: what the trainer trains and evaluates on,
// and what `tessera samples` prints. One function, so the two cannot drift apart.
#pragma once

#include <array>
#include <memory>

#include "data/tokenizer_factory.h"
#include "train/args/arguments.h"
#include "train/batching.h"

namespace tessera::train {

// --tokenizer-type and its files.
data::TokenizerOptions tokenizer_options(const TrainArguments& a);

// The train, validation and test batch sources: --mock-data, or Megatron's GPT (with --model-family bert,
// BERT) datasets over --data-path, divided by --split and blended by the --data-path weights (or each split
// over the whole of its own --train-data-path, --valid-data-path, --test-data-path blend), as many
// samples as --train-iters, --global-batch-size, --eval-interval and --eval-iters ask for (Megatron's
// get_train_valid_test_num_samples). nullptr for a split without documents. The sample indices are
// loaded from the cache, or built and cached; nothing is communicated.
std::array<std::shared_ptr<const BatchSource>, 3> build_batch_sources(const TrainArguments& a);

}  // namespace tessera::train
