#include "eval/zeroshot_evaluation.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/file_io.h"
#include "core/timer.h"
#include "eval/zeroshot_datasets.h"

namespace tessera::eval {
namespace {

std::string sci(double v) {  // Python's '{:.4E}'
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4E", v);
  return buf;
}

std::string python_float(double v) {  // Python's str(float): the shortest round-trip digits
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, end);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string duration(double seconds) {
  int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", static_cast<long>(s / 3600), static_cast<long>(s / 60 % 60),
                static_cast<long>(s % 60));
  return buf;
}

}  // namespace

void finish_wikitext(ZeroShotResult& r) {
  r.avg_loss = r.total / static_cast<double>(r.num_tokenized_tokens - 1);
  r.ppl = std::exp(std::min(20.0, r.avg_loss));
  r.token_ratio = static_cast<double>(r.num_tokenized_tokens - 1) / static_cast<double>(r.num_original_tokens - 1);
  r.adjusted_ppl = std::exp(std::min(20.0, r.avg_loss * r.token_ratio));
}

void check_options(const ZeroShotOptions& o) {
  TESSERA_CHECK(o.task == "WIKITEXT103" || o.task == "LAMBADA", "--task=", o.task,
                ": expected WIKITEXT103 or LAMBADA");
  TESSERA_CHECK(o.micro_batch_size >= 1, "--micro-batch-size=", o.micro_batch_size, ": must be >= 1");
  TESSERA_CHECK(o.overlapping_eval >= 0, "--overlapping-eval=", o.overlapping_eval, ": must be >= 0 (0: the window)");
  open_input_file(o.valid_data, str_cat("--valid-data=", o.valid_data));
}

ZeroShotResult evaluate_zeroshot(const ZeroShotOptions& o, const infer::ModelRunner& runner,
                                 const data::Tokenizer& tokenizer, comm::ProcessGroup& data_group,
                                 const std::function<void(const std::string&)>& progress) {
  ZeroShotOptions with_seq = o;
  if (with_seq.seq_length <= 0) with_seq.seq_length = runner.config().seq_length;
  return evaluate_zeroshot(with_seq, [&](const model::MicroBatch& mb) { return runner.score(mb); }, tokenizer,
                           data_group, progress);
}

ZeroShotResult evaluate_zeroshot(const ZeroShotOptions& o, const BatchScorer& score, const data::Tokenizer& tokenizer,
                                 comm::ProcessGroup& data_group,
                                 const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  check_options(o);
  TESSERA_CHECK(o.seq_length > 0, "evaluate_zeroshot: the window length (--seq-length) is not set");
  const int64_t seq = o.seq_length;
  const bool loss_metric = o.task == "WIKITEXT103";
  ZeroShotResult r;
  r.task = o.task;

  // The samples, built identically on every rank.
  std::function<EvalSample(int64_t)> sample_at;
  std::unique_ptr<LmWindows> windows;
  std::vector<LambadaExample> lambada;
  if (loss_metric) {
    WikitextData d = load_wikitext(o.valid_data, tokenizer);
    r.num_original_tokens = d.num_original_tokens;
    r.num_tokenized_tokens = static_cast<int64_t>(d.tokens.size());
    say(str_cat(" > number of original tokens: ", r.num_original_tokens,
                ", number of detokenized tokens: ", r.num_tokenized_tokens));
    windows = std::make_unique<LmWindows>(std::move(d.tokens), seq, tokenizer.eod(), o.overlapping_eval);
    r.num_examples = windows->size();
    sample_at = [&](int64_t i) { return windows->at(i); };
  } else {
    lambada = load_lambada(o.valid_data, tokenizer, o.strict_lambada);
    r.num_examples = static_cast<int64_t>(lambada.size());
    for (const LambadaExample& e : lambada)
      if (static_cast<int64_t>(e.context.size() + e.label.size()) > seq + 1) ++r.truncated_examples;
    say(str_cat(" > found ", r.num_examples, " samples", r.truncated_examples
                ? str_cat(" (", r.truncated_examples, " longer than --seq-length + 1: their beginning is cut)") : ""));
    sample_at = [&](int64_t i) { return lambada_sample(lambada[i], seq, tokenizer.eod()); };
  }

  // This data-parallel rank's samples, in micro-batches. Each sample's value goes to its global
  // slot; the slots are summed over the group (only one rank fills each) and then in sample order.
  std::vector<double> value(r.num_examples, 0.0);
  std::vector<int64_t> mine;
  for (int64_t i = data_group.rank(); i < r.num_examples; i += data_group.size()) mine.push_back(i);
  const int64_t batches = (static_cast<int64_t>(mine.size()) + o.micro_batch_size - 1) / o.micro_batch_size;
  Timer timer;
  for (int64_t b = 0; b < batches; ++b) {
    if (b % std::max<int64_t>(1, o.log_interval) == 0) {
      double elapsed = timer.seconds();
      say(str_cat("> working on iteration: ", b, "/", batches, " | elapsed ", duration(elapsed),
                  b > 0 ? str_cat(" | time left ", duration(elapsed / b * (batches - b))) : std::string()));
    }
    const int64_t first = b * o.micro_batch_size;
    const int64_t n = std::min<int64_t>(o.micro_batch_size, static_cast<int64_t>(mine.size()) - first);
    std::vector<EvalSample> samples;
    // The model is causal, so positions after the last scored one change nothing: the batch stops
    // there (LAMBADA's padding), which leaves every scored value as with the full window.
    int64_t len = 1;
    for (int64_t k = 0; k < n; ++k) {
      samples.push_back(sample_at(mine[first + k]));
      for (int64_t t = seq; t-- > len;)
        if (samples.back().mask[t] != 0) len = t + 1;
    }
    model::MicroBatch mb;
    mb.tokens = Tensor::empty({n, len}, DType::I32);
    mb.labels = Tensor::empty({n, len}, DType::I32);
    mb.loss_mask = Tensor::empty({n, len});
    for (int64_t k = 0; k < n; ++k) {
      const EvalSample& s = samples[k];
      std::copy(s.tokens.begin(), s.tokens.begin() + len, mb.tokens.host_i32() + k * len);
      std::copy(s.tokens.begin() + 1, s.tokens.begin() + len + 1, mb.labels.host_i32() + k * len);
      std::copy(s.mask.begin(), s.mask.begin() + len, mb.loss_mask.host_f32() + k * len);
    }
    infer::Scores scores = score(mb);
    for (int64_t k = 0; k < n; ++k) {
      double loss = 0;
      bool correct = true;
      for (int64_t t = 0; t < len; ++t) {
        if (samples[k].mask[t] == 0) continue;
        loss -= scores.label_logprob[k * len + t];
        correct = correct && scores.argmax[k * len + t] == samples[k].tokens[t + 1];
      }
      value[mine[first + k]] = loss_metric ? loss : (correct ? 1.0 : 0.0);
    }
  }
  if (data_group.size() > 1) {
    Tensor bits = Tensor::zeros({std::max<int64_t>(1, r.num_examples)}, DType::I64);
    std::memcpy(bits.host_raw(), value.data(), value.size() * sizeof(double));  // zero bits on other ranks' slots
    data_group.all_reduce(bits);
    std::memcpy(value.data(), bits.host_raw(), value.size() * sizeof(double));
  }
  for (double v : value) r.total += v;
  say(str_cat("> evaluated ", r.num_examples, " samples in ", duration(timer.seconds())));
  if (loss_metric) {
    finish_wikitext(r);
  } else {
    r.accuracy = r.total / static_cast<double>(r.num_examples);
  }
  return r;
}

std::string format_result(const ZeroShotResult& r) {
  std::string s = " validation results on " + r.task + " | ";
  if (r.task == "WIKITEXT103") {
    s += "avg loss: " + sci(r.avg_loss) + " | ";
    s += "ppl: " + sci(r.ppl) + " | ";
    s += "adjusted ppl: " + sci(r.adjusted_ppl) + " | ";
    s += "token ratio: " + python_float(r.token_ratio) + " |";
  } else {
    s += "number correct: " + sci(r.total) + " | ";
    s += "total examples: " + sci(static_cast<double>(r.num_examples)) + " | ";
    s += "avg accuracy: " + sci(r.accuracy);
  }
  return s;
}

}  // namespace tessera::eval
