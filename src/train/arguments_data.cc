// The rules of the data: where samples come from, the tokenizer (and so the vocabulary the model is
// built for), and how each iteration's samples split into micro-batches over the data-parallel ranks.
#include "data/tokenizer_factory.h"
#include "train/argument_rules.h"
#include "train/arguments.h"

namespace tessera::train {

using rules::require;
using rules::require_positive;

void finalize_data(TrainArguments& a) {
  // The tokenizer's files are loaded here, so a bad path is reported before any memory is allocated.
  require(a.mock_data != !a.data_path.empty(), "--data-path", a.data_path.empty() ? "(none)" : a.data_path[0],
          "give exactly one of --mock-data and --data-path");
  if (a.mock_data)
    require(a.tokenizer_type == "NullTokenizer", "--tokenizer-type", a.tokenizer_type,
            "--mock-data needs --tokenizer-type NullTokenizer");
  if (a.tokenizer_type == "NullTokenizer")
    require(a.vocab_size >= 2, "--vocab-size", a.vocab_size, "the NullTokenizer needs a vocabulary of at least 2");
  {
    auto tokenizer = data::build_tokenizer({a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model, a.vocab_size});
    a.model.vocab_size = tokenizer->vocab_size();
    a.eod = tokenizer->eod();
  }
  if (a.model.family == "bert") {
    require(a.mask_prob > 0 && a.mask_prob < 1, "--mask-prob", a.mask_prob, "must be in (0, 1)");
    require(a.short_seq_prob >= 0 && a.short_seq_prob <= 1, "--short-seq-prob", a.short_seq_prob, "must be in [0, 1]");
    require(!a.reset_attention_mask, "--reset-attention-mask", "set", "BERT's attention is bidirectional");
  }
  a.model.padded_vocab_size = model::padded_vocab_size(a.model.vocab_size, a.make_vocab_size_divisible_by,
                                                       a.tensor_model_parallel_size);

  // Batches.
  require_positive("--micro-batch-size", a.micro_batch_size);
  if (a.global_batch_size == 0) a.global_batch_size = a.micro_batch_size;
  require_positive("--global-batch-size", a.global_batch_size);
  require(a.global_batch_size % (a.micro_batch_size * a.data_parallel_size()) == 0, "--global-batch-size",
          a.global_batch_size,
          str_cat("must be divisible by --micro-batch-size=", a.micro_batch_size, " x data-parallel size=",
                  a.data_parallel_size()));
  a.num_micro_batches = a.global_batch_size / (a.micro_batch_size * a.data_parallel_size());
  const int64_t pp = a.pipeline_model_parallel_size;
  require(a.virtual_pipeline_size == 1 || a.num_micro_batches % pp == 0, "--global-batch-size", a.global_batch_size,
          str_cat("gives ", a.num_micro_batches, " micro-batches per pipeline (global batch / (micro batch x "
                  "data-parallel size)); the interleaved schedule needs a multiple of "
                  "--pipeline-model-parallel-size=", pp));
}

}  // namespace tessera::train
