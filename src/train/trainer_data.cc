// What the trainer feeds the model: the datasets (built once on rank 0 and cached for the others), the
// micro-batches of each data-parallel rank, the global batch of the ramp-up, and the distillation teacher.
#include "data/tokenizer_factory.h"
#include "train/training_data.h"
#include "train/trainer.h"

namespace tessera::train {

void Trainer::build_datasets() {
  std::array<std::shared_ptr<const BatchSource>, 3> sets;
  if (args_.mock_data) {
    sets = build_batch_sources(args_);
    train_data_ = sets[0];
    valid_data_ = sets[1];
    test_data_ = sets[2];
    return;
  }
  for (int turn = 0; turn < 2; ++turn) {  // rank 0 builds and caches; then the others load the cache
    if ((state_->world_rank() == 0) == (turn == 0)) sets = build_batch_sources(args_);
    world_->barrier();
  }
  train_data_ = sets[0];
  valid_data_ = sets[1];
  test_data_ = sets[2];
  const bool per_split = args_.data_path.empty();  // --train-data-path and the like (not --mock-data here)
  // Without --train-data-path only --skip-train gets here (finalize_data).
  TESSERA_CHECK(train_data_ != nullptr || (per_split && args_.skip_train), "--split=", args_.split,
                ": gives the training split no documents");
  // ids without text have no bytes to count
  const BatchSource* any = train_data_ ? train_data_.get() : valid_data_ ? valid_data_.get() : test_data_.get();
  if (args_.tokenizer_type != "NullTokenizer" && any && any->labels_are_text())
    text_tokenizer_ = data::build_tokenizer(tokenizer_options(args_));
  if (!valid_data_ && args_.eval_iters > 0) {
    say(per_split ? std::string(" WARNING: no --valid-data-path; evaluation is off")
                  : str_cat(" WARNING: --split=", args_.split, " leaves no validation documents; evaluation is off"));
  }
  say(str_cat(" > datasets: ", train_data_ ? train_data_->size() : 0, " training samples",
              valid_data_ ? str_cat(", ", valid_data_->size(), " validation samples") : "",
              test_data_ ? str_cat(", ", test_data_->size(), " test samples") : "",
              per_split ? " (--train-data-path, --valid-data-path, --test-data-path)" : ""));
}

int64_t Trainer::current_global_batch() {
  const int64_t size = args_.batch_schedule.at(consumed_samples_);
  if (announced_global_batch_ != 0 && size != announced_global_batch_)
    say(args_.step_batch_size_schedule.empty()
            ? str_cat("ramping up batch size from ", announced_global_batch_, " to ", size)
            : str_cat("step batch size schedule: global batch size ", announced_global_batch_, " -> ", size, " after ",
                      consumed_samples_, " consumed samples"));
  announced_global_batch_ = size;
  return size;
}

model::MicroBatch Trainer::next_micro_batch(int64_t m) const { return micro_batch(*train_data_, consumed_samples_, m); }

model::MicroBatch Trainer::micro_batch(const BatchSource& data, int64_t first, int64_t m) const {
  const int64_t mbs = args_.micro_batch_size;
  return data.micro_batch(first + (m * args_.data_parallel_size() + state_->coordinates().dp) * mbs, mbs);
}

void Trainer::build_teacher() {
  if (!distilling(args_, iteration_)) {
    if (args_.kd) say(str_cat(" > knowledge distillation ended at iteration ", args_.kd_stop_iteration,
                              " (--kd-stop-iteration): the teacher is not loaded"));
    return;
  }
  const model::ModelConfig& t = args_.teacher_model;
  std::string experts;
  if (t.moe.enabled()) {
    experts = ", experts per layer";
    for (int64_t e : t.moe.layer_experts) experts += str_cat(" ", e);
  }
  say(str_cat(" > knowledge distillation: loss alpha * CE + beta * tau^2 * KL(teacher || student) with alpha ",
              args_.kd_alpha_ce, ", beta ", args_.kd_beta_ce, ", tau ", args_.kd_temp,
              args_.kd_stop_iteration > 0 ? str_cat(", until iteration ", args_.kd_stop_iteration) : std::string(),
              "; teacher from ", args_.load_teacher, ": ", t.num_layers, " layers, hidden size ", t.hidden_size,
              experts, ", ", t.parameter_count(), " parameters",
              schedule_.stages > 1 ? ", whole on each rank of the last pipeline stage" : ""));
  if (state_->coordinates().pp != schedule_.stages - 1) return;
  teacher_ = std::make_unique<Teacher>(args_, tp_, params_.rounded_value_type());
  say(str_cat(" > loaded the teacher from ", args_.load_teacher, " at iteration ", teacher_->iteration()));
}

}  // namespace tessera::train
