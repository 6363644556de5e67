// Megatron's MLP on one rank: fc1 split by columns (SwiGLU's [gate; up] halves split alike), GELU or
// SwiGLU, fc2 split by rows. The dense feed-forward slot, and the experts and shared expert of a
// mixture of experts (model/moe_layer.h).
#pragma once

#include "model/sublayer.h"

namespace tessera::model {

struct MlpOptions {
  int64_t ffn_hidden_size = 0;  // 0: config.ffn_hidden_size
  // false: an expert's MLP on rows its caller gathered over the (expert) tensor group: no communication,
  // forward returning this rank's partial sum and backward its partial dx (ColumnParallelLinear's reduce).
  bool reduce = true;
};

class Mlp final : public Sublayer {
 public:
  Mlp(const ModelConfig& config, const std::string& prefix, ParameterSet& params,
      const parallel::TensorParallelContext& tp, const MlpOptions& options = {});

  std::unique_ptr<SavedTensors> make_record() const override;
  Tensor forward(const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& rec) const override;
  Tensor backward(const Tensor& dy, const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& rec,
                  bool rec_rounded) const override;
  Tensor decode(const Tensor& x, const DecodeLayout& layout, KvCache& cache) const override;
  bool takes_16bit_input() const override { return true; }  // read only by its linear layers

  // The parts, for the grouped experts (model/grouped_mlp.h) that run several Mlps' products together.
  const ColumnParallelLinear& fc1() const { return fc1_; }
  const RowParallelLinear& fc2() const { return fc2_; }
  // y = act(fc1) [rows, ffn / tp], rounded to `rounding` as it is written; and its backward, dfc1
  // (overwritten) from dact.
  Tensor activate(const Tensor& fc1, DType rounding) const;
  void activation_backward(const Tensor& fc1, const Tensor& dact, const Tensor& dfc1) const;

 private:

  const ModelConfig& config_;
  int64_t ffn_local_;
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
};

}  // namespace tessera::model
