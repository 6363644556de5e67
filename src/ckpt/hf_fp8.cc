// DeepSeek-V3's FP8 checkpoints (hf_moe.h): block-quantised weights dequantised on import.
#include <algorithm>
#include <vector>

#include "ckpt/hf_moe.h"
#include "core/check.h"

namespace tessera::ckpt {

void dequantize_fp8_weights(const nlohmann::json& config, std::map<std::string, Tensor>& fp8,
                            std::map<std::string, Tensor>& tensors) {
  if (fp8.empty()) return;
  // quantization_config's weight_block_size (DeepSeek-V3: [128, 128]).
  int64_t block_rows = 128, block_cols = 128;
  const nlohmann::json q = config.value("quantization_config", nlohmann::json::object());
  if (q.is_object() && q.contains("weight_block_size")) {
    const nlohmann::json& b = q["weight_block_size"];
    TESSERA_CHECK(b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer() &&
                      b[0].get<int64_t>() >= 1 && b[1].get<int64_t>() >= 1,
                  "convert: quantization_config weight_block_size is ", b.dump(), ", not two positive integers");
    block_rows = b[0].get<int64_t>(), block_cols = b[1].get<int64_t>();
  }
  for (auto& [name, w] : fp8) {
    const std::string scale_name = name + "_scale_inv";  // X.weight -> X.weight_scale_inv
    const auto it = tensors.find(scale_name);
    TESSERA_CHECK(it != tensors.end(), "convert: the FP8 tensor ", name, " has no ", scale_name);
    TESSERA_CHECK(w.shape().size() == 2, "convert: the FP8 tensor ", name, " is not 2-D: ", shape_str(w.shape()));
    const int64_t rows = w.shape()[0], cols = w.shape()[1];
    const int64_t brows = (rows + block_rows - 1) / block_rows, bcols = (cols + block_cols - 1) / block_cols;
    const Tensor& scale = it->second;
    TESSERA_CHECK(scale.shape() == Shape({brows, bcols}), "convert: ", scale_name, " is ", shape_str(scale.shape()),
                  ", not the [", brows, ", ", bcols, "] blocks of ", block_rows, "x", block_cols, " of ", name, " ",
                  shape_str(w.shape()));
    // weight = fp8 value x its block's scale_inv (DeepSeek's weight_dequant).
    float* v = w.host_f32();
    const float* s = scale.host_f32();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) v[r * cols + c] *= s[(r / block_rows) * bcols + c / block_cols];
    tensors[name] = w;
    tensors.erase(it);
  }
  // A scale without its FP8 weight would be an unused tensor: the mapping reports it by name.
}

}  // namespace tessera::ckpt
