// The parts of a Megatron import both formats share (megatron_legacy.h declares them): a stored weight as
// fp32, the note on a tied model's drifted copy of the embeddings, and the Tessera checkpoint written at the
// end with what Megatron's args record.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/megatron_legacy.h"
#include "kernels/precision.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;  // as megatron_legacy.cc (the layer builds as unity batches)

Tensor megatron_to_fp32(const Tensor& t, const std::string& file, const std::string& key) {
  if (t.dtype() == DType::F32) return t;
  TESSERA_CHECK(t.dtype() == DType::BF16 || t.dtype() == DType::F16, file, ": ", key, " is ", dtype_name(t.dtype()),
                ", not a floating-point weight");
  Tensor out = Tensor::empty(t.shape());
  const auto* src = static_cast<const uint16_t*>(t.host_raw());
  float* dst = out.host_f32();
  for (int64_t i = 0; i < t.numel(); ++i)
    dst[i] = t.dtype() == DType::BF16 ? bf16_to_fp32(src[i]) : kernels::fp16_to_fp32(src[i]);
  return out;
}

std::string megatron_tied_copy_note(const Tensor& copy, const Tensor& embedding, const std::string& key,
                                    const std::string& file, const std::string& what) {
  TESSERA_CHECK(copy.shape() == embedding.shape(), "convert: ", file, ": ", key,
                ", the last stage's copy of the ", what, ", is ", shape_str(copy.shape()),
                " whole but the embedding is ", shape_str(embedding.shape()));
  double largest = 0;
  for (int64_t i = 0; i < copy.numel(); ++i)
    largest = std::max(largest, static_cast<double>(std::abs(copy.host_f32()[i] - embedding.host_f32()[i])));
  if (largest == 0) return "";
  return str_cat("the last pipeline stage's copy of the ", what, " (", key, " in ", file,
                 ") differs from the embedding by up to ", largest, "; the converted model uses the embedding for both");
}

void save_megatron_import(const std::string& save_dir, const model::ModelConfig& c, const MegatronArgs& a,
                          int64_t iteration, const nlohmann::json& converted_from,
                          const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::json args = {{"model", model::to_json(c)},
                         {"tokenizer_type", a.tokenizer_type},
                         {"vocab_file", a.vocab_file},
                         {"merge_file", a.merge_file},
                         {"tokenizer_model", a.tokenizer_model},
                         {"make_vocab_size_divisible_by", a.make_vocab_size_divisible_by},
                         {"bf16", a.bf16},
                         {"fp16", a.fp16},
                         {"converted_from", converted_from}};
  if (a.seed >= 0) args["seed"] = a.seed;
  TrainingState state;
  state.iteration = iteration;
  state.consumed_train_samples = std::max<int64_t>(0, a.consumed_train_samples);
  state.seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : 1234;  // Megatron's default --seed
  state.args = args;
  // The tokenizer's files travel with the checkpoint when they are on this machine.
  std::error_code ec;
  for (const auto& [key, path] : {std::pair{"vocab_file", a.vocab_file}, std::pair{"merge_file", a.merge_file},
                                  std::pair{"tokenizer_model", a.tokenizer_model}})
    if (!path.empty() && fs::is_regular_file(path, ec)) state.tokenizer_files[key] = path;
  save_full_model(save_dir, state, tensors);
}

}  // namespace tessera::ckpt
