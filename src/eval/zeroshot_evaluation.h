// Megatron's zero-shot evaluation (tasks/zeroshot_gpt/evaluate.py): WIKITEXT103 by loss (perplexity,
// and perplexity adjusted to the original word count) and LAMBADA by accuracy. Samples are split
// over the data-parallel ranks; each sample's value is summed in sample order whatever the layout.
#pragma once

#include <functional>
#include <string>

#include "comm/process_group.h"
#include "infer/model_runner.h"
#include "data/tokenizer.h"

namespace tessera::eval {

struct ZeroShotOptions {
  std::string task;        // --task: WIKITEXT103 or LAMBADA
  std::string valid_data;  // --valid-data
  int64_t seq_length = 0;  // the model's, unless --seq-length
  int64_t overlapping_eval = 32;  // --overlapping-eval (Megatron's default)
  bool strict_lambada = false;    // --strict-lambada
  int64_t micro_batch_size = 8;   // --micro-batch-size
  int64_t log_interval = 10;      // --log-interval (batches)
};

struct ZeroShotResult {
  std::string task;
  int64_t num_examples = 0;
  double total = 0;  // summed loss (WIKITEXT103) or number correct (LAMBADA)
  // WIKITEXT103
  int64_t num_tokenized_tokens = 0, num_original_tokens = 0;
  double avg_loss = 0, ppl = 0, adjusted_ppl = 0, token_ratio = 0;
  // LAMBADA
  double accuracy = 0;
  int64_t truncated_examples = 0;  // longer than seq + 1 tokens (their start was cut)
};

// Megatron's metrics from the totals: avg loss = total / (tokens - 1), ppl = exp(min(20, avg loss)),
// token ratio = (tokens - 1) / (original tokens - 1), adjusted ppl = exp(min(20, avg loss x ratio)).
void finish_wikitext(ZeroShotResult& r);

// The checks of the flags that do not need the model (task, micro-batch size, overlap, the data file
// readable), so that eval can make them before it spends minutes loading a checkpoint.
void check_options(const ZeroShotOptions& options);

// Runs the task (check_options first). Every rank calls it; `data_group` splits the samples (sample i goes to data rank
// i mod size). `progress` (may be empty) receives lines for the log.
ZeroShotResult evaluate_zeroshot(const ZeroShotOptions& options, const infer::ModelRunner& runner,
                                 const data::Tokenizer& tokenizer, comm::ProcessGroup& data_group,
                                 const std::function<void(const std::string&)>& progress = {});

// The same with the scores from elsewhere (`tessera eval --server-url`: a server's log-probs):
// `score` answers runner.score's Scores for a micro-batch; options.seq_length must be set. A label's
// argmax only has to tell whether the label was the most likely token (another id when not).
using BatchScorer = std::function<infer::Scores(const model::MicroBatch&)>;
ZeroShotResult evaluate_zeroshot(const ZeroShotOptions& options, const BatchScorer& score,
                                 const data::Tokenizer& tokenizer, comm::ProcessGroup& data_group,
                                 const std::function<void(const std::string&)>& progress = {});

// Megatron's result line: " validation results on WIKITEXT103 | avg loss: ... |".
std::string format_result(const ZeroShotResult& r);

}  // namespace tessera::eval
