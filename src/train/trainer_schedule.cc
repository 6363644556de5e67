// The schedule engine (train/step_engine.h): the schedule runner, one rank's pipeline schedule over a
// global batch's micro-batches, its forwards, backwards and (zero bubble) W passes through the model
// chunks, with the activation accounting the log prints; its step (Trainer::schedule_step, trainer.cc)
// and its line of the interval report (train/trainer.h).
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <utility>

#include "model/weight_gradient_store.h"
#include "train/device_setup.h"
#include "train/fault_injection.h"
#include "train/memory_report.h"
#include "train/step_context.h"
#include "train/trainer.h"
#include "train/straggler_report.h"

namespace tessera::train {

class Trainer::ScheduleEngine final : public StepEngine {
 public:
  explicit ScheduleEngine(Trainer& trainer) : t_(trainer) {}

  StepOutcome step(const GlobalBatch& batch, float lr) override { return t_.schedule_step(batch, lr); }
  model::LossSums evaluate(const std::vector<model::MicroBatch>& batches, double per_sample_loss_weight) override {
    return t_.run_micro_batches(batches, false, 0.0f, per_sample_loss_weight);
  }
  // The bubble as (schedule time - compute) / compute, averaged over ranks, beside (p - 1) / (v m); and
  // each stage's most activation records held at once beside the schedule's maximum, and their most
  // bytes beside the prediction (the most over a stage's data-parallel ranks).
  std::string interval_report(const std::vector<RankInterval>& ranks) const override {
    const pipeline::ScheduleShape& schedule = t_.schedule_;
    if (schedule.stages == 1) return "";
    double bubble = 0;
    std::vector<int> peak(schedule.stages, 0);
    std::vector<double> bytes(schedule.stages, 0), predicted(schedule.stages, 0);
    for (const RankInterval& r : ranks) {
      bubble += r.bubble_fraction / static_cast<float>(ranks.size());
      peak[r.stage] = std::max(peak[r.stage], r.peak_live_activations);
      bytes[r.stage] = std::max(bytes[r.stage], static_cast<double>(r.activation_bytes));
      predicted[r.stage] = std::max(predicted[r.stage], static_cast<double>(r.predicted_activation_bytes));
    }
    std::string held, megabytes_held;
    for (int s = 0; s < schedule.stages; ++s) {
      held += str_cat(s ? " " : "", peak[s], "/", pipeline::theoretical_peak_in_flight(schedule, s));
      megabytes_held += str_cat(s ? " " : "", megabytes(bytes[s]), "/", megabytes(predicted[s]));
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "    pipeline bubble: measured %.3f, theory %s = %.3f | ", bubble,
                  schedule.zero_bubble != pipeline::ZeroBubble::Off ? "(zero bubble, simulated at F = B = W)"
                  : schedule.slices > 1                              ? "(p-1)/(m*n) with n token slices"
                                                                     : "(p-1)/(v*m)",
                  pipeline::theoretical_bubble_fraction(schedule));
    return str_cat(buf, schedule.slices > 1 ? "token-slice activations" : "activations",
                   " held per stage (measured/schedule max): ", held,
                   " | activation MB per stage (measured/predicted): ", megabytes_held);
  }

 private:
  Trainer& t_;
};

std::unique_ptr<StepEngine> Trainer::make_schedule_engine() { return std::make_unique<ScheduleEngine>(*this); }

model::LossSums Trainer::run_micro_batches(const std::vector<model::MicroBatch>& batches, bool training, float grad_scale,
                                           double per_sample_loss_weight, bool settle) {
  // The forwards and backwards make their activations on the device. The host batches stay for the
  // host's reads (the loss tokens); each micro-batch is on the device from its first forward to its last
  // use on this rank (micro_batch_on: the same tensors on the CPU).
  DefaultDeviceScope on_device(args_.device);
  std::vector<std::optional<model::MicroBatch>> device_batches(batches.size());
  auto device_batch = [&](int m) -> const model::MicroBatch& {
    // On a GPU the ids are checked here, on the host, rather than by the model on the device (a sync).
    if (!device_batches[m])
      device_batches[m] = micro_batch_on(batches[m], args_.device,
                                         args_.device.type == DeviceType::CPU ? 0 : args_.model.vocab_size);
    return *device_batches[m];
  };
  const int stage = state_->coordinates().pp;
  pipeline::ScheduleShape shape = schedule_;
  shape.micro_batches = static_cast<int>(batches.size());
  params_.weights_changed();  // an optimizer step or a load may have changed them since the last schedule
  // Zero bubble: the lists from unit costs, and from measured ones after the timed iterations.
  const bool timed_lists = shape.zero_bubble != pipeline::ZeroBubble::Off && training;
  if (timed_lists) {
    if (!zero_bubble_timing_)
      zero_bubble_timing_.emplace(args_.zero_bubble_timers_start_iter, args_.zero_bubble_timers_end_iter);
    if (std::optional<std::string> line = zero_bubble_timing_->update(iteration_, *world_)) say(*line);
  }
  std::vector<pipeline::Op> ops = timed_lists && zero_bubble_timing_->costs()
                                      ? zero_bubble_timing_->ops(shape, stage)
                                      : pipeline::build_schedule(shape, stage, /*forward_only=*/!training);
  // The activation records of the (micro-batch, chunk) pairs between their forward and backward.
  std::map<std::pair<int, int>, std::unique_ptr<model::ChunkRecord>> records;
  model::LossSums losses;
  losses.sums_stay_on_device = true;  // on a GPU: read once below, not after each micro-batch's forward
  auto context = [&](int m) {
    return micro_batch_context(args_.seed, iteration_, training, batches[m].sample_offset, args_.model.seq_length,
                               args_.micro_batch_size, per_sample_loss_weight);
  };
  // Under --overlap-param-gather the forward waits for each bucket of parameters just before its first
  // use, as Megatron's forward pre-hooks do.
  model::ParamHooks forward_hooks, overlapped_backward_hooks;
  if (distributed_optimizer_ && args_.overlap_param_gather)
    forward_hooks.params_needed_below = [this](int64_t end) { buckets_->wait_param_gather_below(end); };
  overlapped_backward_hooks.grads_final_from = [this](int64_t first) { buckets_->mark_final_from(first); };
  pipeline::StageCallbacks callbacks;
  // With token slices in the schedule a micro-batch's record lives from its slice 0's forward to its
  // slice 0's backward and grows and shrinks slice by slice; the records' bytes are counted as they change.
  const bool sliced = shape.slices > 1;
  // Zero bubble (pipeline/zero_bubble.h): each B queues its weight gradients here until its W.
  const bool split_backward = shape.zero_bubble != pipeline::ZeroBubble::Off;
  std::map<std::pair<int, int>, model::WeightGradientStore> weight_gradients;
  // Zero bubble with --overlap-grad-reduce: the last micro-batch's B queues a marker after each layer's
  // weight gradients, so that its W marks the layer's buckets final as it goes. A chunk holds flat
  // offsets below those of the chunks after it, and a bucket is final only once everything above it
  // is, so a chunk's markers hold back (final_below_held: the lowest offset held) until the later chunks'
  // last W passes have run (the schedules run them in that order; the wait is a safeguard).
  std::vector<bool> last_weight_pass_done(chunks_.size(), false);
  std::vector<int64_t> final_below_held(chunks_.size(), -1);
  auto higher_chunks_final = [&](int chunk) {
    return std::all_of(last_weight_pass_done.begin() + chunk + 1, last_weight_pass_done.end(), [](bool b) { return b; });
  };
  model::ParamHooks deferred_backward_hooks;
  int deferring_chunk = 0;  // the chunk whose last B is running
  deferred_backward_hooks.grads_final_from = [&](int64_t first) {
    model::deferred_weight_gradients()->defer([&, first, chunk = deferring_chunk] {
      if (higher_chunks_final(chunk)) {
        buckets_->mark_final_from(first);
      } else {
        final_below_held[chunk] = final_below_held[chunk] < 0 ? first : std::min(final_below_held[chunk], first);
      }
    });
  };
  const int last_slice = shape.slices - 1;
  int live_slices = 0;
  callbacks.forward = [&](int m, int chunk, int slice, const Tensor& input) {
    if (training && m == 0 && slice == 0) maybe_inject_fault(injected_fault_, state_->world_rank(), iteration_ + 1, false);
    if (training && m == 0 && slice == 0) maybe_delay_straggler(state_->world_rank());  // tests of --log-straggler
    std::unique_ptr<model::ChunkRecord>& rec = records[{m, chunk}];
    if (slice == 0) rec = chunks_[chunk]->make_record();
    const int64_t bytes_before = rec->bytes();
    live_slices += 1;
    // Zero bubble: a (micro-batch, chunk) counts until its W (its entry in weight_gradients, from B on),
    // as the schedule's maximum does (pipeline::peak_in_flight).
    peak_live_activations_ = std::max(
        peak_live_activations_, sliced ? live_slices : static_cast<int>(records.size() + weight_gradients.size()));
    model::ForwardContext ctx = context(m);
    if (training) ctx.loss_grad_scale = grad_scale;  // the backward's, below: the head fuses the loss's gradient
    // The teacher's forward on the same micro-batch, just before the student's chunk with the head
    // uses its logits (and holds them until its backward). (--kd is refused with token slices.)
    model::Distillation kd;
    if (teacher_ && chunks_[chunk]->chunk().post_process) {
      kd = teacher_->target(device_batch(m), ctx);
      ctx.distillation = &kd;
      ++teacher_forwards_;
    }
    const model::MicroBatch& batch = device_batch(m);
    Tensor out = sliced ? sliced_chunks_[chunk]->forward_slice(slice, batch, input, ctx, *rec, losses, forward_hooks)
                        : chunks_[chunk]->forward(batch, input, ctx, *rec, losses, forward_hooks);
    if (!training) {
      if (slice == last_slice) records.erase({m, chunk}), live_slices -= shape.slices;
      if (slice == last_slice && chunk + 1 == static_cast<int>(chunks_.size())) device_batches[m].reset();
      return out;
    }
    live_activation_bytes_ += rec->bytes() - bytes_before;
    peak_activation_bytes_ = std::max(peak_activation_bytes_, live_activation_bytes_);
    return out;
  };
  callbacks.backward = [&](int m, int chunk, int slice, const Tensor& grad_output) {
    if (m == 0 && slice == last_slice) maybe_inject_fault(injected_fault_, state_->world_rank(), iteration_ + 1, true);
    // During each chunk's last backward, gradient buckets start their data-parallel all-reduce as soon
    // as they are final (with token slices, in the backward of the last micro-batch's slice 0; with zero
    // bubble, in that backward's W pass).
    bool overlap = args_.overlap_grad_reduce && m + 1 == shape.micro_batches;
    auto it = records.find({m, chunk});
    const int64_t bytes_before = it->second->bytes();
    const model::ParamHooks& hooks = !overlap        ? model::ParamHooks()
                                     : split_backward ? deferred_backward_hooks
                                                      : overlapped_backward_hooks;
    std::optional<model::DeferWeightGradients> defer;  // zero bubble: this B queues its W (backward_weight)
    if (split_backward) defer.emplace(&weight_gradients[{m, chunk}]);
    deferring_chunk = chunk;
    Tensor grad_input = sliced ? sliced_chunks_[chunk]->backward_slice(slice, *it->second, grad_output, context(m),
                                                                       grad_scale, hooks)
                               : chunks_[chunk]->backward(*it->second, grad_output, context(m), grad_scale, hooks);
    live_slices -= 1;
    if (slice == 0) {  // the record goes (backward may have widened what it held: count what it had)
      live_activation_bytes_ -= bytes_before;
      // Zero bubble: what the W passes read (each GEMM's input and output gradient) stays until W.
      if (split_backward) live_activation_bytes_ += weight_gradients[{m, chunk}].bytes();
      peak_activation_bytes_ = std::max(peak_activation_bytes_, live_activation_bytes_);
      records.erase(it);
      if (chunk == 0) device_batches[m].reset();  // the micro-batch's last use on this rank
    } else {  // the slice's own record went; the caches' gradients came
      live_activation_bytes_ -= bytes_before - it->second->bytes();
    }
    return grad_input;
  };
  callbacks.backward_weight = [&](int m, int chunk) {
    auto it = weight_gradients.find({m, chunk});
    TESSERA_CHECK(it != weight_gradients.end(), "pipeline schedule runs W of micro-batch ", m, " chunk ", chunk,
                  " before its B");
    live_activation_bytes_ -= it->second.bytes();
    it->second.run();
    weight_gradients.erase(it);
    if (m + 1 == shape.micro_batches) {  // the chunk's gradients are final: release what waited on it
      last_weight_pass_done[chunk] = true;
      for (int c = static_cast<int>(chunks_.size()); c-- > 0;)
        if (final_below_held[c] >= 0 && higher_chunks_final(c))
          buckets_->mark_final_from(std::exchange(final_below_held[c], -1));
    }
  };
  pipeline::PipelineTimes step;
  pipeline::run_schedule(ops, p2p_.get(), callbacks, step);
  times_ += step;
  if (timed_lists) zero_bubble_timing_->record(iteration_, step);
  TESSERA_CHECK(records.empty(), "pipeline schedule left ", records.size(), " activation records behind");
  TESSERA_CHECK(weight_gradients.empty(), "pipeline schedule left ", weight_gradients.size(), " W passes unrun");
  if (settle) losses.settle();  // the sums a GPU kept: one copy after every micro-batch's work is queued
  return losses;
}

}  // namespace tessera::train
