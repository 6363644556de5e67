// Megatron's --moe-grouped-gemm (its GroupedMLP): a rank's local experts, Mlps of one shape, run as one
// strided batched GEMM per product (kernels/grouped_linear.h) rather than one GEMM per expert. Each
// expert's rows are padded with zero rows to the largest count among them (no padding with
// --moe-pad-expert-input-to-capacity, where every expert takes its capacity): a padded row is a
// product of zeros, adds nothing to any gradient, and its outputs are dropped. The parameters are the
// experts' own (the same names, the same checkpoints); a ParameterSet lays out experts declared one
// after another at one stride, which is what makes each product one batched GEMM. Weights are read in
// fp32 and rounded by the GEMM under --bf16/--fp16 (the rounded-weight cache keeps a copy per
// parameter, not one batch of them).
#pragma once

#include <vector>

#include "model/mlp.h"

namespace tessera::model {

class GroupedMlp {
 public:
  // The experts, in the order of their rows.
  GroupedMlp(const ModelConfig& config, std::vector<const Mlp*> experts);

  std::unique_ptr<SavedTensors> make_record() const;
  // rows [sum counts, h], expert j's counts[j] rows after expert j-1's -> each row's output from its
  // expert, this rank's partial sum over the expert tensor group (as Mlp with reduce = false).
  Tensor forward(const Tensor& rows, const std::vector<int64_t>& counts, bool rows_rounded, SavedTensors& rec) const;
  // dy [sum counts, h] -> this rank's partial d rows; accumulates the experts' gradients.
  Tensor backward(const Tensor& dy, const Tensor& rows, const std::vector<int64_t>& counts, bool rows_rounded,
                  SavedTensors& rec, bool rec_rounded) const;

 private:
  const ModelConfig& config_;
  std::vector<const Mlp*> experts_;  // their parameters are allocated after this is made
};

}  // namespace tessera::model
