#include "train/training_log.h"

#include <cstdio>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/launcher.h"

namespace tessera::train {

std::string scale_str(float scale) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(scale));
  return buf;
}
namespace {

std::string printf_string(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  return buf;
}

std::string format_duration(double seconds) {
  auto s = static_cast<long long>(seconds + 0.5);
  if (s >= 3600) return printf_string("%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return printf_string("%02lld:%02lld", s / 60, s % 60);
}

}  // namespace

bool progress_bar_wanted() {
  if (const char* forced = std::getenv("TESSERA_PROGRESS")) return std::string(forced) == "1";
  // Launchers give each rank a pseudo-terminal even when their own output goes to a file, so a rank's
  // stdout being a terminal says nothing there; scripts that know set TESSERA_PROGRESS=1.
  return !launcher_rank() && ::isatty(STDOUT_FILENO) == 1;
}

std::string format_iteration_line(const IterationStats& s) {
  std::string line = " [" + timestamp() + "]";
  line += printf_string(" iteration %8lld/%8lld |", static_cast<long long>(s.iteration),
                        static_cast<long long>(s.train_iters));
  line += printf_string(" consumed samples: %12lld |", static_cast<long long>(s.consumed_samples));
  line += printf_string(" elapsed time per iteration (ms): %.1f |", s.elapsed_ms_per_iteration);
  // Megatron prints %.1f; a CPU does well under 1 TFLOP/s, which that would show as 0.0, so keep three
  // significant digits below 10.
  line += printf_string(s.tflops_per_device >= 10 ? " throughput per GPU (TFLOP/s/GPU): %.1f |"
                                                  : " throughput per GPU (TFLOP/s/GPU): %.3g |",
                        s.tflops_per_device);
  line += printf_string(" learning rate: %.6E |", s.learning_rate);
  line += printf_string(" global batch size: %5lld |", static_cast<long long>(s.global_batch_size));
  line += printf_string(" lm loss: %.6E |", s.lm_loss);
  for (const auto& [name, value] : s.auxiliary_losses) line += printf_string(" %s: %.6E |", name.c_str(), value);
  if (s.expert_load)
    line += printf_string(" expert load min/max/cv: %.3f/%.3f/%.3f | dropped tokens: %.4f |", s.expert_load->min,
                          s.expert_load->max, s.expert_load->cv, s.expert_load->dropped);
  line += printf_string(" loss scale: %.1f |", s.loss_scale);
  line += printf_string(" grad norm: %.3f |", s.grad_norm);
  if (s.params_norm) line += printf_string(" params norm: %.3f |", *s.params_norm);
  line += printf_string(" number of skipped iterations: %3lld |", static_cast<long long>(s.skipped_iterations));
  line += printf_string(" number of nan iterations: %3lld |", static_cast<long long>(s.nan_iterations));
  return line;
}

std::string format_validation_line(int64_t iteration, const Evaluation& e, const std::string& split) {
  const std::string where = split.empty() ? std::string() : " on " + split + " set";
  std::string line = printf_string(" validation loss at iteration %lld%s | lm loss value: %.6E | lm loss PPL: %.6E | ",
                                   static_cast<long long>(iteration), where.c_str(), e.lm_loss,
                                   std::exp(std::min(e.lm_loss, 20.0)));
  for (const auto& [name, value] : e.auxiliary)
    line += printf_string("%s value: %.6E | %s PPL: %.6E | ", name.c_str(), value, name.c_str(),
                          std::exp(std::min(value, 20.0)));
  if (e.bits_per_byte) line += printf_string("bits per byte: %.4f | ", *e.bits_per_byte);
  return line;
}

std::string format_datetime_line(const std::string& text) { return "[" + text + "] datetime: " + timestamp() + " "; }

TrainingLog::TrainingLog(const std::string& log_dir, const std::string& tensorboard_dir)
    : terminal_(progress_bar_wanted()) {
  if (!log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(log_dir, ec);
    TESSERA_CHECK(!ec, "--log-dir=", log_dir, ": cannot create the directory: ", ec.message());
    std::string path = (std::filesystem::path(log_dir) / "metrics.jsonl").string();
    jsonl_ = std::make_unique<std::ofstream>(path, std::ios::app);
    TESSERA_CHECK(jsonl_->good(), "--log-dir: cannot write ", path);
  }
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
}

void TrainingLog::print(const std::string& line) {
  if (bar_shown_) std::cout << "\r\033[K";
  bar_shown_ = false;
  std::cout << line << std::endl;
}

void TrainingLog::iteration(const IterationStats& s) {
  print(format_iteration_line(s));
  if (jsonl_) {
    nlohmann::json j = {{"iteration", s.iteration},
                        {"consumed_samples", s.consumed_samples},
                        {"global_batch_size", s.global_batch_size},
                        {"lm_loss", s.lm_loss},
                        {"learning_rate", s.learning_rate},
                        {"grad_norm", s.grad_norm},
                        {"elapsed_ms_per_iteration", s.elapsed_ms_per_iteration},
                        {"tflops_per_device", s.tflops_per_device},
                        {"tokens_per_second", s.tokens_per_second},
                        {"skipped_iterations", s.skipped_iterations},
                        {"nan_iterations", s.nan_iterations}};
    if (s.params_norm) j["params_norm"] = *s.params_norm;
    for (const auto& [name, value] : s.auxiliary_losses) j[name] = value;
    if (s.expert_load)
      j["expert_load"] = {{"min", s.expert_load->min}, {"max", s.expert_load->max}, {"cv", s.expert_load->cv},
                          {"dropped", s.expert_load->dropped}};
    *jsonl_ << j.dump() << std::endl;
  }
  if (tensorboard_) {
    tensorboard_->add_scalar("lm loss", static_cast<float>(s.lm_loss), s.iteration);
    for (const auto& [name, value] : s.auxiliary_losses) tensorboard_->add_scalar(name, static_cast<float>(value), s.iteration);
    if (s.expert_load) {
      tensorboard_->add_scalar("moe/expert_load_min", static_cast<float>(s.expert_load->min), s.iteration);
      tensorboard_->add_scalar("moe/expert_load_max", static_cast<float>(s.expert_load->max), s.iteration);
      tensorboard_->add_scalar("moe/expert_load_cv", static_cast<float>(s.expert_load->cv), s.iteration);
      tensorboard_->add_scalar("moe/dropped_tokens", static_cast<float>(s.expert_load->dropped), s.iteration);
    }
    tensorboard_->add_scalar("learning-rate", static_cast<float>(s.learning_rate), s.iteration);
    tensorboard_->add_scalar("grad-norm", static_cast<float>(s.grad_norm), s.iteration);
    if (s.params_norm) tensorboard_->add_scalar("params-norm", static_cast<float>(*s.params_norm), s.iteration);
    tensorboard_->flush();
  }
}

void TrainingLog::evaluation_line(const std::string& line) {
  std::string rule(line.size() + 1, '-');
  print(rule);
  print(line);
  print(rule);
}

void TrainingLog::final_evaluation(int64_t iteration, const std::string& split, const Evaluation& e) {
  record_evaluation(iteration, split, format_validation_line(iteration, e, split), e);
}

void TrainingLog::validation(int64_t iteration, const Evaluation& e) {
  record_evaluation(iteration, "validation", format_validation_line(iteration, e), e);
}

void TrainingLog::record_evaluation(int64_t iteration, const std::string& split, const std::string& line,
                                    const Evaluation& e) {
  evaluation_line(line);
  if (jsonl_) {
    nlohmann::json j = {{"iteration", iteration}, {split + "_lm_loss", e.lm_loss}};
    if (e.bits_per_byte) j[split + "_bits_per_byte"] = *e.bits_per_byte;
    for (const auto& [name, value] : e.auxiliary) j[split + "_" + name] = value;
    *jsonl_ << j.dump() << std::endl;
  }
  if (tensorboard_) {
    tensorboard_->add_scalar("lm loss " + split, static_cast<float>(e.lm_loss), iteration);
    tensorboard_->add_scalar("lm loss " + split + " ppl", static_cast<float>(std::exp(std::min(e.lm_loss, 20.0))), iteration);
    if (e.bits_per_byte) tensorboard_->add_scalar("bits per byte " + split, static_cast<float>(*e.bits_per_byte), iteration);
    for (const auto& [name, value] : e.auxiliary)
      tensorboard_->add_scalar(name + " " + split, static_cast<float>(value), iteration);
    tensorboard_->flush();
  }
}

void TrainingLog::progress(int64_t iteration, int64_t total, double seconds_per_iteration) {
  if (!terminal_) return;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * iteration / std::max<int64_t>(total, 1));
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  std::cout << "\r\033[K [" << bar << "] " << iteration << "/" << total << "  "
            << format_duration(seconds_per_iteration * static_cast<double>(total - iteration)) << " left"
            << std::flush;
  bar_shown_ = true;
}

}  // namespace tessera::train
