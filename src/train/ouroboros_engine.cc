#include "train/ouroboros_engine.h"

#include <algorithm>
#include <cstdio>

#include "core/check.h"
#include "train/memory_report.h"

namespace tessera::train {

OuroborosEngine::OuroborosEngine(const TrainArguments& args, comm::ParallelState& state,
                                 const parallel::TensorParallelContext& tp, model::ParameterSet* whole,
                                 std::unique_ptr<StepEngine> whole_engine)
    : whole_(whole), whole_engine_(std::move(whole_engine)), micro_batches_(args.num_micro_batches), load_(args.load) {
  const bool ring = engine_holds_model(args);
  // Data parallelism: each replica runs the ring on its micro-batches (the trainer deals them); the
  // driver adds the replicas' gradients in replica order before each update.
  const OuroborosOptions o{static_cast<int>(args.ouroboros_modules), args.ouroboros_warmup_iters, args.adam,
                           args.seed, ring ? &state.pipeline_group() : nullptr, &tp, &state.data_group(),
                           static_cast<int>(args.ouroboros_emulated_replicas), args.device};
  driver_ = std::make_unique<OuroborosDriver>(args.model, o);
  const comm::RankCoordinates rc = state.coordinates();
  char buf[64];
  std::snprintf(buf, sizeof buf, "ouroboros.tp%02d.pp%02d.dp%03d.safetensors", rc.tp, rc.pp, rc.dp);
  file_name_ = buf;
  const int64_t stages = args.pipeline_model_parallel_size;
  description_.push_back(str_cat(
      " > Ouroboros (", ring ? str_cat(stages, " pipeline ranks, rank 0 holding modules 0 and ", o.modules - 1)
                             : std::string("one pipeline rank"),
      tp.size() > 1 ? str_cat(", tensor parallel over ", tp.size()) : std::string(),
      args.data_parallel_size() > 1 ? str_cat(", ", args.data_parallel_size(), " data-parallel replicas")
                                    : std::string(),
      "): ", o.modules, " modules of ", args.model.num_layers / o.modules,
      " layers, module k's gradient K-1-k iterations late after ", o.warmup_iters,
      " synchronous iterations; the tied embedding from both ends (docs/ouroboros.md)"));
  if (ring) {  // the trainer's parameters are empty there: what the modules hold
    int64_t held = 0;
    for (int k = 0; k < driver_->modules(); ++k)
      if (driver_->holds(k)) held += driver_->parameters(k).numel();
    description_.push_back(str_cat(" > number of parameters in the Ouroboros modules of (tensor, pipeline) rank (",
                                   tp.rank(), ", ", rc.pp, "): ", held));
  }
}

StepOutcome OuroborosEngine::step(const GlobalBatch& batch, float lr) {
  driver_->step(batch.micro_batches, batch.loss_tokens, lr);
  if (whole_) driver_->copy_weights_to(*whole_);
  StepOutcome out;
  out.lm_loss_sum = static_cast<float>(driver_->last_loss_sum());  // as the schedule reports it: an fp32 value
  for (double v : driver_->last_auxiliary_sums()) out.auxiliary_sums.push_back(static_cast<float>(v));
  out.optimizer.grad_norm = driver_->last_grad_norm();
  return out;
}

model::LossSums OuroborosEngine::evaluate(const std::vector<model::MicroBatch>& batches,
                                          double per_sample_loss_weight) {
  if (whole_engine_) return whole_engine_->evaluate(batches, per_sample_loss_weight);
  // On P ranks: forward through the modules, a global batch's micro-batches at a time (what training
  // holds at once).
  model::LossSums sums;
  const size_t step = static_cast<size_t>(micro_batches_);
  for (size_t first = 0; first < batches.size(); first += step) {
    const std::vector<model::MicroBatch> part(batches.begin() + static_cast<std::ptrdiff_t>(first),
                                              batches.begin() + static_cast<std::ptrdiff_t>(
                                                                    std::min(batches.size(), first + step)));
    driver_->forward_only(part, per_sample_loss_weight, sums);
  }
  return sums;
}

std::vector<ckpt::ExtraFile> OuroborosEngine::checkpoint_files() const {
  return {driver_->checkpoint_file(file_name_)};
}

void OuroborosEngine::resume(const std::string& dir, int64_t iteration, uint64_t seed,
                             const std::function<std::vector<model::MicroBatch>(int64_t)>& batches) {
  driver_->load_checkpoint_file(ckpt::open_extra_file(dir, file_name_), batches, seed);
  TESSERA_CHECK(driver_->iteration() == iteration, "--load ", load_, ": the Ouroboros state is at iteration ",
                driver_->iteration(), ", the checkpoint at ", iteration);
  if (whole_) driver_->copy_weights_to(*whole_);
}

std::string OuroborosEngine::interval_report(const std::vector<RankInterval>&) const {
  std::string kept;
  for (int k = 0; k < driver_->modules(); ++k)
    if (driver_->holds(k))
      kept += str_cat(kept.empty() ? "" : " | ", "module ", k, ": ", driver_->held_weight_versions(k),
                      " earlier weight versions (",
                      megabytes(static_cast<double>(driver_->held_weight_versions(k)) *
                                static_cast<double>(driver_->parameters(k).values().nbytes())),
                      " MB), ", driver_->held_records(k), " activation records");
  return str_cat("    ouroboros delays keep (rank 0): ", kept);
}

OuroborosDriver* ouroboros_driver(StepEngine& engine) {
  auto* ouroboros = dynamic_cast<OuroborosEngine*>(&engine);
  return ouroboros ? &ouroboros->driver() : nullptr;
}

void check_ouroboros_checkpoint_layout(const nlohmann::json& saved, const TrainArguments& a) {
  struct Size {
    const char* key;  // in the checkpoint's arguments (trainer_checkpoint.cc, arguments_json)
    const char* flag;
    int64_t here;
  };
  const Size sizes[] = {{"pipeline_model_parallel_size", "--pipeline-model-parallel-size", a.pipeline_model_parallel_size},
                        {"tensor_model_parallel_size", "--tensor-model-parallel-size", a.tensor_model_parallel_size}};
  for (const Size& s : sizes) {
    const int64_t was = saved.value(s.key, int64_t{1});
    TESSERA_CHECK(was == s.here, "--load ", a.load, ": the Ouroboros checkpoint was saved at ", s.flag, "=", was,
                  ", this run has ", s.flag, "=", s.here,
                  " (an Ouroboros run resumes only at the layout that saved it)");
  }
}

}  // namespace tessera::train
