// What a training run tells its user: Megatron's iteration and validation lines on stdout, a progress
// bar with the time left on a terminal (progress_bar_wanted), metrics as JSON lines (--log-dir) and TensorBoard
// scalars (--tensorboard-dir).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "train/expert_load.h"
#include "train/tensorboard_writer.h"

namespace tessera::train {

// A loss scale as Megatron's log line prints it ("4294967296.0").
std::string scale_str(float scale);

struct IterationStats {
  int64_t iteration = 0, train_iters = 0, consumed_samples = 0, global_batch_size = 0;
  double elapsed_ms_per_iteration = 0, tflops_per_device = 0, tokens_per_second = 0;
  double learning_rate = 0, lm_loss = 0, loss_scale = 1, grad_norm = 0;
  std::optional<double> params_norm;  // --log-params-norm
  int64_t skipped_iterations = 0, nan_iterations = 0;
  std::vector<std::pair<std::string, double>> auxiliary_losses;  // the model's, by name, after the lm loss
  std::optional<ExpertLoad> expert_load;  // MoE models: routing over the interval
};

// Megatron's log line, e.g.
// " [2026-11-29 21:00:00] iteration       10/     200 | consumed samples:          160 | ... |"
std::string format_iteration_line(const IterationStats& s);
// The result of an evaluation: the mean per-token loss, and the same loss in bits per byte of the text
// the scored tokens stand for (comparable across tokenizers; absent without text, e.g. mock data).
struct Evaluation {
  double lm_loss = 0;
  std::optional<double> bits_per_byte;
  std::vector<std::pair<std::string, double>> auxiliary;  // the model's other losses (BERT's sop loss), by name
};

// Megatron's validation line: " validation loss at iteration 10 | lm loss value: ... | lm loss PPL: ... | ",
// then each auxiliary loss as Megatron ("sop loss value: ... | sop loss PPL: ... | "), then
// "bits per byte: ... | " when known; after training, with the split: " validation loss at
// iteration 10 on test set | ...".
std::string format_validation_line(int64_t iteration, const Evaluation& e, const std::string& split = "");
// Whether to draw the progress bar: TESSERA_PROGRESS=1 or 0 when set; otherwise when stdout is a
// terminal and the process was not started by mpirun, srun or another PMI launcher.
bool progress_bar_wanted();
// Megatron's print_datetime: "[TEXT] datetime: 2026-12-01 09:00:00 ".
std::string format_datetime_line(const std::string& text);

class TrainingLog {
 public:
  TrainingLog(const std::string& log_dir, const std::string& tensorboard_dir);

  void iteration(const IterationStats& s);
  void validation(int64_t iteration, const Evaluation& e);
  // An evaluation after training, of split "validation" or "test": the line with " on <split> set", and
  // <split>_lm_loss in the JSON lines, "lm loss <split>" (and ppl) in TensorBoard.
  void final_evaluation(int64_t iteration, const std::string& split, const Evaluation& e);
  // Redraws the progress bar (terminal only): iteration of total, seconds per iteration so far.
  void progress(int64_t iteration, int64_t total, double seconds_per_iteration);
  // Prints a line, clearing the progress bar first.
  void print(const std::string& line);

 private:
  void evaluation_line(const std::string& line);  // between rules, as Megatron
  // The line, and <split>_lm_loss (<split>_bits_per_byte) in the JSON lines and TensorBoard.
  void record_evaluation(int64_t iteration, const std::string& split, const std::string& line, const Evaluation& e);
  bool terminal_;
  bool bar_shown_ = false;
  std::unique_ptr<std::ofstream> jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace tessera::train
