#include "train/memory_report.h"

#include <algorithm>
#include <cstdio>

#include "kernels/cpu_features.h"
#include "kernels/gemm.h"
#include "kernels/precision.h"
#include "model/activation_memory.h"
#include "train/training_log.h"

namespace tessera::train {

std::string megabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / (1024.0 * 1024.0));
  return buf;
}

MemoryPrediction predict_memory(const TrainArguments& a, const pipeline::ScheduleShape& schedule, int stage,
                                int64_t parameters) {
  MemoryPrediction p;
  p.parameters = parameters;
  // fp32 weight and gradient, and Adam's two fp32 moments, which the distributed optimizer splits over dp.
  p.bytes_per_parameter = 8.0 + 8.0 / static_cast<double>(a.use_distributed_optimizer ? a.data_parallel_size() : 1);
  p.weight_and_optimizer = p.bytes_per_parameter * static_cast<double>(parameters);
  // Under context parallelism a rank's records hold its seq / cp tokens of each sample (the flash
  // attention kernel keeps no scores, so nothing grows with the whole sequence).
  model::ActivationLayout layout{a.micro_batch_size, a.model.seq_length / a.context_parallel_size,
                                 a.tensor_model_parallel_size, a.sequence_parallel,
                                 a.recompute_granularity == "selective", a.expert_model_parallel_size,
                                 a.expert_tensor_parallel_size > 0 ? a.expert_tensor_parallel_size
                                                                   : a.tensor_model_parallel_size};
  p.activation_per_layer = model::layer_record_bytes(a.model, layout);
  p.korthikanti_per_layer = model::korthikanti_layer_bytes(a.model, layout);
  p.head_per_micro_batch = model::chunk_extra_bytes(a.model, layout, false, true) -
                           model::chunk_extra_bytes(a.model, layout, false, false) +
                           model::mtp_record_bytes(a.model, layout);  // the MTP modules beside the head
  // Each forward keeps its chunk's record until the matching backward; the first chunk also keeps the
  // tokens and the last the head's tensors (the logits above all), so the peak is walked along the
  // schedule rather than taken as records in flight times one size.
  const int64_t chunk_layers = pipeline::stage_layer_count(a.layer_split, schedule.stages, stage) / schedule.chunks;
  // Each chunk's own layers: MoE layers (--moe-layer-freq, a pyramid) keep more than dense ones.
  auto chunk_range = [&](int chunk) { return pipeline::chunk_layers(a.layer_split, schedule, {stage, chunk}); };
  auto layers_bytes = [&](int chunk) {
    const pipeline::LayerRange r = chunk_range(chunk);
    return model::chunk_record_bytes(a.model, layout, r.first + 1, r.count, a.recompute);
  };
  for (int chunk = 0; chunk < schedule.chunks; ++chunk) {
    const pipeline::LayerRange r = chunk_range(chunk);
    for (int64_t layer = r.first + 1; layer <= r.first + r.count; ++layer)
      if (a.model.moe.experts(layer) > 0)
        p.moe_layer_per_layer = std::max(p.moe_layer_per_layer, model::layer_record_bytes(a.model, layout, layer));
  }
  // Zero bubble: from a chunk's B to its W, what the W pass reads instead of the record (each deferred
  // GEMM's fp32 input and output gradient).
  auto weight_pass_bytes = [&](int chunk) {
    const pipeline::LayerRange r = chunk_range(chunk);
    double bytes = pipeline::is_last_chunk(schedule, {stage, chunk})
                       ? model::head_weight_gradient_bytes(a.model, layout) + model::mtp_weight_gradient_bytes(a.model, layout)
                       : 0.0;
    for (int i = 0; i < r.count; ++i) bytes += model::layer_weight_gradient_bytes(a.model, layout, r.first + 1 + i);
    return bytes;
  };
  // Token slices: the caches replace the keys and values a layer record keeps (none under full
  // recomputation, 16-bit ones under mixed precision), in fp32.
  // The caches' bytes beyond what the records would keep; a layer's keys and values in fp32 (one cache);
  // and the keys and values the chunk's records would keep.
  double slice_caches_extra = 0, kv_per_layer_fp32 = 0, kept = 0;
  if (!a.token_slices.empty()) {
    const double kv_per_layer = model::layer_kv_elements(a.model, a.micro_batch_size, a.tensor_model_parallel_size);
    int64_t recomputed = 0;  // layers of a chunk whose records keep only a group input
    if (a.recompute.method == model::RecomputeMethod::Uniform) recomputed = chunk_layers;
    if (a.recompute.method == model::RecomputeMethod::Block)
      recomputed = std::min<int64_t>(a.recompute.num_layers, chunk_layers);
    kept = kv_per_layer * static_cast<double>((chunk_layers - recomputed) * dtype_size(a.model.params_dtype));
    kv_per_layer_fp32 = kv_per_layer * 4.0;
    p.token_slice_caches = kv_per_layer * 4.0 * static_cast<double>(chunk_layers * schedule.chunks);
    slice_caches_extra = kv_per_layer * 4.0 * static_cast<double>(chunk_layers) - kept;
  }
  auto chunk_bytes = [&](int chunk) {
    const pipeline::ChunkId id{stage, chunk};
    const bool last = pipeline::is_last_chunk(schedule, id);
    // Each chunk's own layers: --account-for-embedding/loss-in-pipeline-split leave the first and last a
    // layer fewer than the stage's others.
    return layers_bytes(chunk) + model::chunk_extra_bytes(a.model, layout, pipeline::is_first_chunk(schedule, id), last) +
           (last ? model::mtp_record_bytes(a.model, layout) : 0.0);
  };
  const std::vector<pipeline::Op> ops = pipeline::build_schedule(schedule, stage);
  if (schedule.slices == 1) {
    // One stage's slices in one forward: with multi-token prediction the modules read a copy of the whole
    // sequence's h0 (and keep its positions instead of the tokens, as many bytes).
    const double mtp_h0 = a.token_slices.empty() ? 0.0 : model::sliced_mtp_gradient_bytes(a.model, layout);
    auto record = [&](int chunk) {
      return chunk_bytes(chunk) + slice_caches_extra +
             (pipeline::is_last_chunk(schedule, {stage, chunk}) ? mtp_h0 : 0.0);
    };
    // Walked as the trainer counts: a forward adds its record, a backward removes it (and under zero
    // bubble adds what its W pass holds), a W removes that.
    const bool split = std::any_of(ops.begin(), ops.end(),
                                   [](const pipeline::Op& op) { return op.kind == pipeline::OpKind::BackwardWeight; });
    double live = 0;
    for (const pipeline::Op& op : ops) {
      if (op.kind == pipeline::OpKind::Forward) live += record(op.chunk);
      if (op.kind == pipeline::OpKind::Backward) live += (split ? weight_pass_bytes(op.chunk) : 0.0) - record(op.chunk);
      if (op.kind == pipeline::OpKind::BackwardWeight) live -= weight_pass_bytes(op.chunk);
      p.activations = std::max(p.activations, live);
    }
    for (int chunk = 0; split && chunk < schedule.chunks; ++chunk)
      p.weight_pass_per_micro_batch = std::max(p.weight_pass_per_micro_batch, weight_pass_bytes(chunk));
  } else {  // TeraPipe across stages: a slice's records are its share of the tokens (less the keys and
            // values, which are in the caches); the caches live from slice 0's forward to slice 0's
            // backward, their gradients from the last slice's backward on (a later micro-batch's forwards
            // run meanwhile). Like the measured peak, taken after forwards.
    // Multi-token prediction on the last chunk runs once over the whole sequence: its record (and the
    // copies it works on) comes with the last slice's forward and goes with its backward, which leaves
    // the gradient of the head's output, each slice's share going with that slice's backward.
    const double caches = kv_per_layer_fp32 * static_cast<double>(chunk_layers), cache_grads = caches;
    const double mtp_sequence = model::sliced_mtp_sequence_bytes(a.model, layout);
    const double mtp_gradient = model::sliced_mtp_gradient_bytes(a.model, layout);
    const double mtp_in_chunk = a.model.mtp_num_layers > 0 ? model::mtp_record_bytes(a.model, layout) +
                                                                 4.0 * static_cast<double>(layout.seq * layout.micro_batch)
                                                           : 0.0;  // the modules' record and the tokens
    const int last = schedule.slices - 1;
    double live = 0;
    for (const pipeline::Op& op : ops) {
      if (op.kind != pipeline::OpKind::Forward && op.kind != pipeline::OpKind::Backward) continue;
      const double share = static_cast<double>(a.token_slices[static_cast<size_t>(op.slice)]) /
                           static_cast<double>(a.model.seq_length);
      const bool mtp = mtp_sequence > 0 && pipeline::is_last_chunk(schedule, {stage, op.chunk});
      const double bytes = (chunk_bytes(op.chunk) - kept - (mtp ? mtp_in_chunk : 0.0)) * share +
                           (op.slice == 0 ? caches : 0.0) + (mtp && op.slice == last ? mtp_sequence : 0.0);
      if (op.kind == pipeline::OpKind::Forward) {
        live += bytes;
        p.activations = std::max(p.activations, live);
      } else {
        live += (op.slice == last ? cache_grads + (mtp ? mtp_gradient : 0.0) : 0.0) - bytes -
                (op.slice == 0 ? cache_grads : 0.0) - (mtp ? mtp_gradient * share : 0.0);
      }
    }
  }
  return p;
}

std::string memory_report(const TrainArguments& a, const MemoryPrediction& p) {
  const char* recompute = a.recompute_granularity == "full" ? " (full recomputation keeps only group inputs)" : "";
  return str_cat(
      " > theoretical memory of this rank:\n",
      "   parameters: ", p.parameters, " x ", p.bytes_per_parameter, " bytes (fp32 weight, gradient, Adam moments",
      a.use_distributed_optimizer ? str_cat(" distributed over ", a.data_parallel_size(), " data-parallel ranks") : "",
      ") = ",
      megabytes(p.weight_and_optimizer - p.rounded_weights), " MB\n",
      p.rounded_weights > 0 ? str_cat("   GEMM weights rounded to ", dtype_name(a.model.params_dtype),
                                      " once per step (", dtype_name(p.rounded_weights_type), " copies): ", megabytes(p.rounded_weights), " MB\n")
                            : std::string(),
      "   activation memory per transformer layer and micro-batch: ", megabytes(p.activation_per_layer),
      " MB (Korthikanti et al., 16-bit activations with dropout masks: ", megabytes(p.korthikanti_per_layer),
      " MB)", recompute, "\n",
      p.moe_layer_per_layer > 0
          ? str_cat("   activation memory per MoE layer and micro-batch (routing taken as balanced): ",
                    megabytes(p.moe_layer_per_layer), " MB\n")
          : std::string(),
      p.weight_pass_per_micro_batch > 0
          ? str_cat("   zero bubble: what a chunk's W pass holds from its B to its W per micro-batch (fp32 inputs "
                    "and output gradients of the deferred GEMMs, in place of the chunk's record): ",
                    megabytes(p.weight_pass_per_micro_batch), " MB\n")
          : std::string(),
      "   output layer per micro-batch (fp32 logits shard, final norm, labels): ", megabytes(p.head_per_micro_batch),
      " MB, on the last pipeline stage\n",
      p.token_slice_caches > 0
          ? str_cat("   token-slice key/value caches per micro-batch (--pipeline-token-slices, fp32, held from the "
                    "first slice's forward to the last slice's backward, their gradients as much again during "
                    "backward): ", megabytes(p.token_slice_caches), " MB\n")
          : std::string(),
      "   Theoretical memory footprints: weight and optimizer=", megabytes(p.weight_and_optimizer),
      " MB, activation=", megabytes(p.activations), " MB, total=", megabytes(p.weight_and_optimizer + p.activations),
      " MB");
}


std::string mixed_precision_summary(const TrainArguments& a) {
  const DType t = a.model.params_dtype;
  const char* name = dtype_name(t);
  std::string where;
  if (a.device.type == DeviceType::CUDA) {
    where = kernels::gemm_buffer_type(t, a.device) == t
                ? str_cat("cuBLASLt ", name, " x ", name, " kernels (fp32 accumulation) on ", a.device.str(),
                          ", the weights cast to ", name, " once per step")
                : str_cat("cuBLASLt on ", a.device.str(), ", fp32 buffers rounded to ", name,
                          ", the weights rounded once per step");
  } else {
    const kernels::CpuFeatures& cpu = kernels::cpu_features();
    const char* instructions = t == DType::BF16 ? "AVX512-BF16 or AMX-BF16" : "AVX512-FP16 or AMX-FP16";
    std::string path;
    if (kernels::GemmBackend::for_device(Device::cpu()).native_16bit(t))
      path = str_cat("native: oneDNN ", name, " kernels");
    else if (cpu.native_16bit(t))
      path = str_cat("this oneDNN has no ", name, " kernel for them, so rounded to ", name, " on the fp32 kernels");
    else
      path = str_cat("no ", instructions, ", so rounded to ", name, " on the fp32 kernels");
    where = str_cat("CPU features: ", cpu.str(), "; ", path);
  }
  std::string s = str_cat(" > mixed precision: ", name, " GEMM inputs with fp32 accumulation (", where,
                          "), fp32 master weights, gradients accumulated and all-reduced in fp32");
  if (!a.loss_scaler) return s;
  const optim::LossScalerConfig& c = *a.loss_scaler;
  if (!c.dynamic) return str_cat(s, ", constant loss scale ", scale_str(c.initial_scale));
  return str_cat(s, ", dynamic loss scale from ", scale_str(c.initial_scale), " (min ", scale_str(c.min_scale),
                 ", window ", c.window, ", hysteresis ", c.hysteresis, ")");
}

}  // namespace tessera::train
