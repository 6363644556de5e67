#include "tasks/finetune.h"

#include <chrono>
#include <map>
#include <numeric>

#include "ckpt/checkpoint.h"
#include "core/check.h"
#include "data/numpy_random.h"
#include "tasks/finetune_lm.h"
#include "tasks/finetune_race.h"
#include "train/args/argument_rules.h"
#include "train/step_context.h"
#include "train/training_log.h"

namespace tessera::tasks {
namespace {

using train::rules::require;

bool is_multiple_choice_task(const std::string& task) { return task == "RACE" || task == "CNTRL-RANKER"; }
bool is_conditional_lm_task(const std::string& task) { return task == "CNTRL-KEYWORDS" || task == "CNTRL-GENERATOR"; }

}  // namespace

PretrainedLoad load_pretrained_weights(const std::string& dir, model::ParameterSet& params) {
  ckpt::TrainingState state;
  std::vector<std::pair<std::string, Tensor>> saved = ckpt::load_full_model(dir, &state);
  std::map<std::string, Tensor> by_name(saved.begin(), saved.end());
  PretrainedLoad out;
  out.iteration = state.iteration;
  for (model::Parameter& p : params.params()) {
    auto it = by_name.find(p.spec.name);
    if (it == by_name.end()) {
      out.initialised.push_back(p.spec.name);
      continue;
    }
    const Tensor& t = it->second;
    if (t.shape() == p.value.shape()) {
      std::copy(t.host_f32(), t.host_f32() + t.numel(), p.value.host_f32());
    } else {
      // A vocabulary padded to another multiple: the rows both have.
      const bool rows = p.spec.vocab_rows && t.shape().size() == 2 && p.value.shape().size() == 2 &&
                        t.dim(1) == p.value.dim(1);
      TESSERA_CHECK(rows, "checkpoint tensor ", p.spec.name, " in ", dir, " has shape ", shape_str(t.shape()),
                    ", the model expects ", shape_str(p.value.shape()));
      const int64_t n = std::min(t.dim(0), p.value.dim(0)) * t.dim(1);
      std::copy(t.host_f32(), t.host_f32() + n, p.value.host_f32());
    }
    out.loaded.push_back(p.spec.name);
    by_name.erase(it);
  }
  for (const auto& [name, t] : by_name) out.discarded.push_back(name);
  return out;
}

void validate(const FinetuneArguments& a) {
  require(is_multiple_choice_task(a.task) || is_conditional_lm_task(a.task), "--task", a.task,
          "must be RACE, CNTRL-RANKER, CNTRL-KEYWORDS or CNTRL-GENERATOR");
  require(!a.pretrained_checkpoint.empty(), "--pretrained-checkpoint", a.pretrained_checkpoint,
          is_multiple_choice_task(a.task) ? "is required (a BERT checkpoint from pretrain_bert, or a fine-tuned one)"
                                          : "is required (a GPT checkpoint from train, or a fine-tuned one)");
  require(a.ranker_choices >= 2, "--ranker-choices", a.ranker_choices, "must be >= 2");
  require(a.epochs >= 0, "--epochs", a.epochs, "must be >= 0");
  require(a.epochs == 0 || !a.train_data.empty(), "--train-data", "", "is required with --epochs > 0");
  require(a.micro_batch_size > 0, "--micro-batch-size", a.micro_batch_size, "must be > 0");
  require(a.seq_length >= 0, "--seq-length", a.seq_length, "must be >= 0 (0: the pretrained model's)");
  require(a.lr >= 0, "--lr", a.lr, "must be >= 0");
  require(a.min_lr >= 0 && a.min_lr <= a.lr, "--min-lr", a.min_lr, "must be in [0, --lr]");
  optim::parse_lr_decay_style(a.lr_decay_style);
  require(a.lr_warmup_fraction >= 0 && a.lr_warmup_fraction < 1, "--lr-warmup-fraction", a.lr_warmup_fraction,
          "must be in [0, 1)");
  require(a.hidden_dropout >= 0 && a.hidden_dropout < 1, "--hidden-dropout", a.hidden_dropout, "must be in [0, 1)");
  require(a.attention_dropout >= 0 && a.attention_dropout < 1, "--attention-dropout", a.attention_dropout,
          "must be in [0, 1)");
  require(a.adam.weight_decay >= 0, "--weight-decay", a.adam.weight_decay, "must be >= 0");
  require(a.adam.clip_grad >= 0, "--clip-grad", a.adam.clip_grad, "must be >= 0");
  require(a.log_interval > 0, "--log-interval", a.log_interval, "must be > 0");
}

data::TokenizerOptions finetune_tokenizer_options(const FinetuneArguments& a, const nlohmann::json& recorded,
                                                  const std::map<std::string, std::string>& carried) {
  auto recorded_string = [&](const char* key) {
    if (const auto copy = carried.find(key); copy != carried.end()) return copy->second;
    return recorded.contains(key) && recorded.at(key).is_string() ? recorded.at(key).get<std::string>() : std::string();
  };
  auto given_or_recorded = [&](const std::string& given, const char* key) {
    return given.empty() ? recorded_string(key) : given;
  };
  data::TokenizerOptions o;
  o.type = given_or_recorded(a.tokenizer_type, "tokenizer_type");
  o.vocab_file = given_or_recorded(a.vocab_file, "vocab_file");
  o.merge_file = given_or_recorded(a.merge_file, "merge_file");
  o.tokenizer_model = given_or_recorded(a.tokenizer_model, "tokenizer_model");
  return o;
}

std::map<std::string, std::string> tokenizer_files(const data::TokenizerOptions& o) {
  return {{"vocab_file", o.vocab_file}, {"merge_file", o.merge_file}, {"tokenizer_model", o.tokenizer_model}};
}

optim::LrSchedule finetune_lr_schedule(const FinetuneArguments& a, int64_t train_iters) {
  optim::LrSchedule schedule;
  schedule.max_lr = a.lr;
  schedule.min_lr = a.min_lr;
  schedule.style = optim::parse_lr_decay_style(a.lr_decay_style);
  schedule.decay_steps = static_cast<double>(train_iters * a.micro_batch_size);
  schedule.warmup_steps = static_cast<double>(static_cast<int64_t>(a.lr_warmup_fraction * schedule.decay_steps));
  return schedule;
}

std::string finetune_iteration_line(const FinetuneArguments& a, const model::ModelConfig& config, int64_t iteration,
                                    int64_t train_iters, int64_t rows, int64_t iterations, double seconds, float lr,
                                    double mean_loss, const optim::StepResult& step) {
  train::IterationStats s;
  s.iteration = iteration;
  s.train_iters = train_iters;
  s.consumed_samples = iteration * a.micro_batch_size;
  s.global_batch_size = a.micro_batch_size;
  s.elapsed_ms_per_iteration = seconds * 1000 / static_cast<double>(iterations);
  s.tflops_per_device = model::model_flops_per_iteration(config, rows) / (seconds / static_cast<double>(iterations)) / 1e12;
  s.learning_rate = lr;
  s.lm_loss = mean_loss;
  s.grad_norm = step.grad_norm;
  s.skipped_iterations = step.skipped ? 1 : 0;
  return train::format_iteration_line(s);
}

int64_t finetune_iters_per_epoch(const FinetuneArguments& a, int64_t n, const char* examples) {
  const int64_t mbs = a.micro_batch_size;
  const int64_t iters = a.keep_last ? (n + mbs - 1) / mbs : n / mbs;
  require(a.epochs == 0 || iters > 0, "--micro-batch-size", mbs,
          str_cat("leaves no full micro-batch of the ", n, " training ", examples,
                  " (--keep-last keeps a partial one)"));
  return iters;
}

void load_pretrained_and_report(const FinetuneArguments& a, model::ParameterSet& params, const char* discarded_by,
                                const std::function<void(const std::string&)>& say) {
  const PretrainedLoad load = load_pretrained_weights(a.pretrained_checkpoint, params);
  say(str_cat(" loaded pretrained checkpoint from ", a.pretrained_checkpoint, " at iteration ", load.iteration, ": ",
              load.loaded.size(), " tensors"));
  if (discarded_by && !load.discarded.empty()) {
    std::string names;
    for (const std::string& n : load.discarded) names += (names.empty() ? "" : ", ") + n;
    say(str_cat(" > not used by the ", discarded_by, ": ", names));
  }
  for (const std::string& name : load.initialised)
    say(str_cat(" ***WARNING*** could not find ", name, " in the checkpoint, initializing to random"));
}

std::vector<double> run_finetune_epochs(
    const FinetuneArguments& a, const model::ModelConfig& config, int64_t n, int64_t iters_per_epoch,
    model::ParameterSet& params, model::LanguageModelChunk& net, optim::AdamWOptimizer& optimizer,
    const std::function<FinetuneStep(std::span<const int64_t>, int64_t)>& step_for,
    const std::function<void(int64_t)>& save, const std::function<void(int64_t, int64_t)>& evaluate,
    const std::function<void(const std::string&)>& say) {
  const int64_t mbs = a.micro_batch_size, train_iters = a.epochs * iters_per_epoch;
  const optim::LrSchedule schedule = finetune_lr_schedule(a, train_iters);
  std::vector<double> losses;
  int64_t iteration = 0;
  say("training ...");
  if (a.epochs == 0) {
    say("evaluation only mode, setting epoch to -1");
    evaluate(-1, iteration);
    say("done :-)");
    return losses;
  }
  double interval_loss = 0, interval_seconds = 0;
  int64_t interval_iters = 0;
  for (int64_t epoch = 0; epoch < a.epochs; ++epoch) {
    say(str_cat("working on epoch ", epoch + 1, " ..."));
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    data::NumpyRandomState rng(static_cast<uint32_t>(a.seed + static_cast<uint64_t>(epoch)));
    rng.shuffle(std::span<int64_t>(order));
    for (int64_t it = 0; it < iters_per_epoch; ++it) {
      const auto start = std::chrono::steady_clock::now();
      const int64_t first = it * mbs, count = std::min(mbs, n - first);
      const FinetuneStep s = step_for(
          std::span<const int64_t>(order).subspan(static_cast<size_t>(first), static_cast<size_t>(count)), first);
      const float lr = schedule.lr(iteration * mbs);
      const model::ForwardContext ctx =
          train::micro_batch_context(a.seed, iteration, /*training=*/true, s.sample_offset, s.seq, s.rows);
      params.zero_grad();
      params.weights_changed();
      model::LossSums sums;
      const std::unique_ptr<model::ChunkRecord> rec = net.make_record();
      net.forward(s.mb, Tensor(), ctx, *rec, sums);
      net.backward(*rec, Tensor(), ctx, train::gradient_scale(s.normalizer));
      const optim::StepResult step = optimizer.step(lr);
      ++iteration;
      const double loss = train::mean_loss(sums.lm, s.normalizer);
      losses.push_back(loss);
      interval_loss += loss;
      interval_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++interval_iters;
      if (iteration % a.log_interval == 0 || iteration == train_iters) {
        say(finetune_iteration_line(a, config, iteration, train_iters, s.logged_rows, interval_iters,
                                    interval_seconds, lr, interval_loss / static_cast<double>(interval_iters), step));
        interval_loss = interval_seconds = 0;
        interval_iters = 0;
      }
    }
    if (!a.save.empty()) {
      save(iteration);
      say(str_cat(" saved checkpoint at iteration ", iteration, " to ", a.save));
    }
    evaluate(epoch, iteration);
  }
  say("done :-)");
  return losses;
}

FinetuneResult finetune(const FinetuneArguments& a, const std::function<void(const std::string&)>& say) {
  validate(a);
  return is_multiple_choice_task(a.task) ? finetune_multiple_choice(a, say) : finetune_conditional_lm(a, say);
}

}  // namespace tessera::tasks
