// The rules of the data: where samples come from, the tokenizer (and so the vocabulary the model is
// built for), and how each iteration's samples split into micro-batches over the data-parallel ranks.
#include <unistd.h>

#include <filesystem>

#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer_factory.h"
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {

using rules::require;
using rules::require_positive;

std::string rampup_text(const TrainArguments& a) {
  std::string text;
  for (int64_t v : a.rampup_batch_size) text += str_cat(text.empty() ? "" : " ", v);
  return text;
}

namespace {

// An unusable --data-cache-path showed only as "not cached: ..." in the datasets' start-up lines, and
// every run rebuilt its indices. It must be a writable directory, or be creatable in one.
void check_data_cache_path(const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path existing = fs::absolute(path, ec);
  while (!fs::exists(existing, ec) && existing.has_relative_path()) existing = existing.parent_path();
  require(fs::is_directory(existing, ec), "--data-cache-path", path,
          str_cat(existing.string(), " is a file; give a directory for the dataset index caches"));
  require(access(existing.c_str(), W_OK) == 0, "--data-cache-path", path,
          str_cat("cannot write to ", existing.string(), ", where the dataset index caches would go"));
}

}  // namespace

void finalize_data(TrainArguments& a) {
  // The tokenizer's files are loaded here, so a bad path is reported before any memory is allocated.
  // Megatron: "A single data source must be provided": --mock-data, --data-path, or the per-split paths.
  const char* per_split_flag = nullptr;  // the first per-split path given
  for (int i = 2; i >= 0; --i)
    if (!a.split_data_path[i].empty()) per_split_flag = data::kSplitDataPathFlags[i];
  if (per_split_flag) {
    const std::string given = str_cat("given with ", per_split_flag, ": ");
    require(a.data_path.empty(), "--data-path", a.data_path.empty() ? "" : a.data_path[0],
            given + "give either --data-path (with --split) or --train-data-path, --valid-data-path and "
                    "--test-data-path, not both");
    require(!a.mock_data, "--mock-data", "set", given + "give either --mock-data or the dataset paths");
    require(!a.split_given, "--split", a.split,
            given + "--split does not apply to per-split paths: each split takes the whole of its datasets");
    require(!a.split_data_path[0].empty() || a.skip_train, "--train-data-path", "(none)",
            str_cat("training needs it (", per_split_flag, " is given; --skip-train only evaluates)"));
  } else {
    require(a.mock_data != !a.data_path.empty(), "--data-path", a.data_path.empty() ? "(none)" : a.data_path[0],
            "give exactly one of --mock-data and --data-path (or --train-data-path, --valid-data-path, "
            "--test-data-path)");
  }
  // --split is read only with --data-path, but a typo is a typo with --mock-data too (a script that
  // switches to real data later would fail there).
  if (!per_split_flag) data::parse_split(a.split);
  check_data_cache_path(a.data_cache_path);
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
  // Megatron's default (None): one micro-batch on every data-parallel rank. 0 stands for "not given"
  // (parse_train_arguments refuses a 0 that was given).
  const bool steps = !a.step_batch_size_schedule.empty();
  if (steps) {
    // Megatron: "Cannot specify both --step-batch-size-schedule and --global-batch-size" (the schedule's
    // last entry is the final size). Megatron ignores the deprecated --rampup-batch-size; two schedules for
    // one run are refused here rather than one silently dropped.
    require(a.global_batch_size == 0, "--global-batch-size", a.global_batch_size,
            "cannot be combined with --step-batch-size-schedule (its last entry is the final global batch)");
    require(a.rampup_batch_size.empty(), "--rampup-batch-size", rampup_text(a),
            "cannot be combined with --step-batch-size-schedule (Megatron deprecates --rampup-batch-size for it)");
    a.batch_schedule = GlobalBatchSchedule(parse_step_batch_size_schedule(a.step_batch_size_schedule, a.model.seq_length));
    a.global_batch_size = a.batch_schedule.final_size();
  }
  if (a.global_batch_size == 0) a.global_batch_size = a.micro_batch_size * a.data_parallel_size();
  require_positive("--global-batch-size", a.global_batch_size);
  std::optional<BatchSizeRampup> rampup;
  const std::string given = rampup_text(a);
  if (!steps && !a.rampup_batch_size.empty()) {
    const int64_t start = a.rampup_batch_size[0], increment = a.rampup_batch_size[1], samples = a.rampup_batch_size[2];
    require(start > 0 && increment > 0 && samples >= 0, "--rampup-batch-size", given,
            "START and INCREMENT must be positive and SAMPLES at least 0");
    require(start <= a.global_batch_size, "--rampup-batch-size", given,
            str_cat("START must not exceed --global-batch-size=", a.global_batch_size));
    require((a.global_batch_size - start) % increment == 0, "--rampup-batch-size", given,
            str_cat("--global-batch-size=", a.global_batch_size, " minus START must be a multiple of INCREMENT"));
    rampup = BatchSizeRampup{start, increment, samples};
  }
  if (!steps) a.batch_schedule = GlobalBatchSchedule(a.global_batch_size, rampup);
  // Every global batch of the run (each size of a ramp, then --global-batch-size) splits into whole
  // micro-batches on every data-parallel rank, checked here rather than when the ramp reaches it. Of a
  // step schedule, the entries that the run's iterations use (Megatron checks each when it applies it;
  // --train-samples is required with it, and refused in finalize_training_loop when missing).
  std::vector<std::pair<int64_t, int64_t>> checked;  // (size, consumed samples when first used, or -1)
  if (steps) {
    for (const BatchSizeStep& s : a.batch_schedule.steps_used(a.batch_schedule.iterations_for(a.train_samples)))
      checked.push_back({s.size, s.threshold});
    // The final size sets the micro-batches per rank that the schedule's shape and evaluation use, so it
    // must divide even when the run stops before its threshold (Megatron would not reach it).
    const BatchSizeStep& last = a.batch_schedule.steps().back();
    if (a.train_samples > 0 && (checked.empty() || checked.back().second < last.threshold))
      checked.push_back({last.size, last.threshold});
  } else {
    for (int64_t size : a.batch_schedule.sizes()) checked.push_back({size, -1});
  }
  const int64_t per_micro_batch = a.micro_batch_size * a.data_parallel_size(), pp = a.pipeline_model_parallel_size;
  for (const auto& [size, from] : checked) {
    // The final size is --global-batch-size's; the others are the ramp's ("passes through a global batch of 6").
    const bool final_size = !steps && size == a.global_batch_size;
    const char* flag = steps ? "--step-batch-size-schedule" : final_size ? "--global-batch-size" : "--rampup-batch-size";
    const std::string value = steps ? a.step_batch_size_schedule : final_size ? std::to_string(size) : given;
    const std::string which = steps ? str_cat("gives a global batch of ", size, " after ", from, " consumed samples, which ")
                              : final_size ? "" : str_cat("passes through a global batch of ", size, ", which ");
    require(size % per_micro_batch == 0, flag, value,
            str_cat(which, "must be divisible by --micro-batch-size=", a.micro_batch_size, " x data-parallel size=",
                    a.data_parallel_size()));
    const int64_t micro_batches = size / per_micro_batch;
    require(a.virtual_pipeline_size == 1 || a.zero_bubble == pipeline::ZeroBubble::V || micro_batches % pp == 0, flag, value,
            str_cat(which, "gives ", micro_batches, " micro-batches per pipeline (global batch / (micro batch x "
                    "data-parallel size)); the interleaved schedule needs a multiple of "
                    "--pipeline-model-parallel-size=", pp));
  }
  a.num_micro_batches = a.global_batch_size / per_micro_batch;
}

}  // namespace tessera::train
