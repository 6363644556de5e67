// The schedule runner: one rank's pipeline schedule over a global batch's micro-batches, its forwards,
// backwards and (zero bubble) W passes through the model chunks, with the activation accounting the log
// prints (train/trainer.h).
#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "model/weight_gradient_store.h"
#include "train/device_setup.h"
#include "train/fault_injection.h"
#include "train/trainer.h"
#include "train/straggler_report.h"

namespace tessera::train {

model::LossSums Trainer::run_micro_batches(const std::vector<model::MicroBatch>& batches, bool training, float grad_scale,
                                           double per_sample_loss_weight) {
  // The forwards and backwards make their activations on the device. The host batches stay for the
  // host's reads (the loss tokens); each micro-batch is on the device from its first forward to its last
  // use on this rank (micro_batch_on: the same tensors on the CPU).
  DefaultDeviceScope on_device(args_.device);
  std::vector<std::optional<model::MicroBatch>> device_batches(batches.size());
  auto device_batch = [&](int m) -> const model::MicroBatch& {
    if (!device_batches[m]) device_batches[m] = micro_batch_on(batches[m], args_.device);
    return *device_batches[m];
  };
  const int stage = state_->coordinates().pp;
  pipeline::ScheduleShape shape = schedule_;
  shape.micro_batches = static_cast<int>(batches.size());
  params_.weights_changed();  // an optimizer step or a load may have changed them since the last schedule
  std::vector<pipeline::Op> ops = pipeline::build_schedule(shape, stage, /*forward_only=*/!training);
  // The activation records of the (micro-batch, chunk) pairs between their forward and backward.
  std::map<std::pair<int, int>, std::unique_ptr<model::ChunkRecord>> records;
  model::LossSums losses;
  auto context = [&](int m) {
    model::ForwardContext ctx{args_.seed, training ? iteration_ + 1 : iteration_, batches[m].sample_offset,
                              training, args_.model.seq_length, args_.micro_batch_size};
    ctx.per_sample_loss_weight = per_sample_loss_weight;
    return ctx;
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
  const int last_slice = shape.slices - 1;
  int live_slices = 0;
  callbacks.forward = [&](int m, int chunk, int slice, const Tensor& input) {
    if (training && m == 0 && slice == 0) maybe_inject_fault(injected_fault_, state_->world_rank(), iteration_ + 1, false);
    if (training && m == 0 && slice == 0) maybe_delay_straggler(state_->world_rank());  // tests of --log-straggler
    std::unique_ptr<model::ChunkRecord>& rec = records[{m, chunk}];
    if (slice == 0) rec = chunks_[chunk]->make_record();
    const int64_t bytes_before = rec->bytes();
    live_slices += 1;
    peak_live_activations_ =
        std::max(peak_live_activations_, sliced ? live_slices : static_cast<int>(records.size()));
    model::ForwardContext ctx = context(m);
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
    // as they are final (with token slices, in the backward of the last micro-batch's slice 0).
    // (Zero bubble: the weight gradients come in the W passes, so the buckets wait for finalize_gradients.)
    bool overlap = args_.overlap_grad_reduce && m + 1 == shape.micro_batches && !split_backward;
    auto it = records.find({m, chunk});
    const int64_t bytes_before = it->second->bytes();
    const model::ParamHooks& hooks = overlap ? overlapped_backward_hooks : model::ParamHooks();
    std::optional<model::DeferWeightGradients> defer;  // zero bubble: this B queues its W (backward_weight)
    if (split_backward) defer.emplace(&weight_gradients[{m, chunk}]);
    Tensor grad_input = sliced ? sliced_chunks_[chunk]->backward_slice(slice, *it->second, grad_output, context(m),
                                                                       grad_scale, hooks)
                               : chunks_[chunk]->backward(*it->second, grad_output, context(m), grad_scale, hooks);
    live_slices -= 1;
    if (slice == 0) {  // the record goes (backward may have widened what it held: count what it had)
      live_activation_bytes_ -= bytes_before;
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
    it->second.run();
    weight_gradients.erase(it);
  };
  pipeline::run_schedule(ops, p2p_.get(), callbacks, times_);
  TESSERA_CHECK(records.empty(), "pipeline schedule left ", records.size(), " activation records behind");
  TESSERA_CHECK(weight_gradients.empty(), "pipeline schedule left ", weight_gradients.size(), " W passes unrun");
  return losses;
}

}  // namespace tessera::train
