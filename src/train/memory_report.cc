#include "train/memory_report.h"

#include <cstdio>

#include "model/activation_memory.h"

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
  model::ActivationLayout layout{a.micro_batch_size, a.seq_length, a.tensor_model_parallel_size,
                                 a.sequence_parallel, a.recompute_granularity == "selective"};
  p.activation_per_layer = model::layer_record_bytes(a.model, layout);
  p.korthikanti_per_layer = model::korthikanti_layer_bytes(a.model, layout);
  const int64_t chunk_layers = a.num_layers / (schedule.stages * schedule.chunks);
  p.activations = model::chunk_record_bytes(a.model, layout, chunk_layers, a.recompute) *
                  pipeline::theoretical_peak_in_flight(schedule, stage);
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
                                      " once per step (fp32 copies): ", megabytes(p.rounded_weights), " MB\n")
                            : std::string(),
      "   activation memory per transformer layer and micro-batch: ", megabytes(p.activation_per_layer),
      " MB (Korthikanti et al., 16-bit activations with dropout masks: ", megabytes(p.korthikanti_per_layer),
      " MB)", recompute, "\n",
      "   Theoretical memory footprints: weight and optimizer=", megabytes(p.weight_and_optimizer),
      " MB, activation=", megabytes(p.activations), " MB, total=", megabytes(p.weight_and_optimizer + p.activations),
      " MB");
}

}  // namespace tessera::train
