// The building blocks a transformer is made of: tensor-parallel linear layers and a norm, each owning
// its parameters in the ParameterSet and running explicit forward and backward through the kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kernels/dropout.h"
#include "model/config.h"
#include "model/parameters.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"

namespace tessera::model {

// What varies between micro-batches and iterations: dropout keys and whether to drop at all.
struct LossSums;
struct Distillation;  // model/vocab_parallel_distillation.h
struct TokenSlice;    // model/token_sliced_chunk.h
struct ForwardContext {
  uint64_t seed = 0;
  int64_t iteration = 0;
  int64_t sample_offset = 0;  // global index of the micro-batch's first sample (keys dropout)
  bool training = true;
  int64_t seq = 0, batch = 0;
  Tensor doc_start;  // int32 [batch, seq]: document-causal attention (set by the model); undefined: causal
  Tensor padding_mask;  // int32 [batch, seq], 1 on tokens: bidirectional attention's keys (set by the model)
  // The global batch's loss tokens per sample. The trainer divides every loss by the loss tokens; a loss
  // that is a mean over samples (BERT's sentence order) is added times this, so that the division gives
  // its mean per sample and its gradient is seeded alike.
  double per_sample_loss_weight = 1.0;
  // Set by the model for its modules: where a forward adds auxiliary losses (null in a recomputed
  // forward, which must not count them twice), and in backward the scale of the objective's gradient.
  LossSums* losses = nullptr;
  float grad_scale = 0;
  // A training forward whose backward the trainer will give this grad_scale (0: not known): the output
  // layer may then compute the loss's gradient with the loss, in one pass over the logits (LMHead::forward).
  float loss_grad_scale = 0;
  // Knowledge distillation (set by the trainer for the chunk with the head): the teacher's logits of this
  // micro-batch, which the head adds the KD term against. Null: the LM loss alone.
  const Distillation* distillation = nullptr;
  // TeraPipe's token slicing (model/token_sliced_chunk.h): this forward or backward is one token slice of the
  // micro-batch (seq is the slice's length), attending to the keys and values of the earlier slices
  // in the slice's caches. Null: the whole sequence.
  TokenSlice* token_slice = nullptr;
  // Context parallelism (model/context_parallel_chunk.h): this rank holds two chunks of each sequence
  // (parallel/context_parallel.h), seq being their total length; attention runs around the group's
  // ring and dropout is keyed by the chunks' global rows. Null: the whole sequence.
  const parallel::ContextParallelContext* context_parallel = nullptr;
};

// The part of the [seq, batch, hidden] residual stream this rank holds: all of it, or its sequence
// shard under sequence parallelism (dropout masks are keyed by global coordinates).
kernels::DropoutRegion residual_region(const ForwardContext& ctx, int64_t hidden,
                                       const parallel::TensorParallelContext& tp);
// The residual stream this rank holds as parts each keyed by one DropoutRegion: under context parallelism
// its rows of each of its two chunks (keyed by the chunk's rows of the whole sequence), else all of it
// (residual_region). f(first row, rows, region), rows counting [seq, batch] rows of the rank's tensor.
void for_each_residual_part(const ForwardContext& ctx, int64_t hidden, const parallel::TensorParallelContext& tp,
                            const std::function<void(int64_t, int64_t, const kernels::DropoutRegion&)>& f);
// Dropout (backward: its gradient) in place on the residual stream this rank holds: residual_region, or
// under context parallelism each of its two chunks keyed by the chunk's rows of the whole sequence.
void residual_dropout(const Tensor& x, float p, uint64_t seed, uint64_t stream, const ForwardContext& ctx,
                      int64_t hidden, const parallel::TensorParallelContext& tp, bool backward);

// Dropout stream of one site (embedding, attention probabilities, attention output, MLP output) of one
// layer at one iteration.
uint64_t dropout_stream(int64_t iteration, int64_t layer_number, int site);

// The values a GEMM reads for a weight: its copy rounded to input_type where the parameter set keeps
// one (ParameterSet::cache_rounded_weights), else the fp32 weight for the GEMM to round.
struct GemmWeight {
  Tensor values;
  bool rounded;
};
GemmWeight gemm_weight(const ParameterSet& params, const Parameter& weight, DType input_type);

// An fp32 activation x that feeds GEMMs of input type params_dtype and is kept for backward, made what
// they read: on a GPU whose GEMMs read 16-bit buffers (kernels::gemm_buffer_type), replaced by its 16-bit
// encoding, which the record then keeps as it is (no second encoding in the GEMM or in the record's
// storage; the fp32 tensor is freed here); else rounded in place where inputs are reused
// (kernels::round_in_place_for_gemm). Returns whether x holds values of the GEMM input type. A reader
// other than a GEMM widens it (kernels::to_fp32) where it reads it.
bool make_gemm_input(DType params_dtype, Tensor& x);

// y = x W^T + b with a parameter's weight: from its packed copy (ParameterSet::keep_packed_weights) when
// the rows are a decoding step's few and the inputs fp32, else through kernels::linear_forward.
void linear_forward(const ParameterSet& params, const Parameter& weight, const Tensor& x, const Tensor& b,
                    const Tensor& y, DType input_type, bool x_rounded = false);

// A linear layer whose output features are split over the tensor group (Megatron's
// ColumnParallelLinear). The full weight [out, in] is seen as out_view + [in] (e.g. [2, F, in] for
// SwiGLU's fc1, [groups, per_group_rows, in] for the fused QKV) and split along out_view[split_dim], so
// that each rank's rows are whole gates / whole query groups.
class ColumnParallelLinear {
 public:
  // gemm_input_type: GemmArgs::input_type of its GEMMs (the model's params_dtype). reduce = false: no
  // communication at all, backward returning this rank's partial dx (an expert's layer, whose caller
  // gathers its rows and reduces its outputs over the expert tensor group itself).
  ColumnParallelLinear(ParameterSet& params, const std::string& prefix, int64_t in, const Shape& out_view,
                       int split_dim, bool bias, float init_std, const parallel::TensorParallelContext& tp,
                       DType gemm_input_type = DType::F32, bool reduce = true);
  // x [tokens (/tp when sequence parallel), in] -> y [tokens, out / tp]. x_rounded: x already holds
  // values of the GEMM input type (kernels::GemmArgs::a_rounded).
  Tensor forward(const Tensor& x, bool x_rounded = false) const;
  // Accumulates weight/bias gradients; returns dx shaped like x (summed over the tensor group).
  Tensor backward(const Tensor& dy, const Tensor& x, bool x_rounded = false) const;

  Parameter* weight() const { return weight_; }
  Parameter* bias() const { return bias_; }  // null without one

 private:
  const parallel::TensorParallelContext& tp_;
  const ParameterSet* params_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  int64_t in_, out_local_;
  DType input_type_;
  bool reduce_;
};

// A linear layer whose input features are split over the tensor group (Megatron's RowParallelLinear):
// each rank multiplies its slice, the partial outputs are all-reduced (or reduce-scattered to sequence
// shards) and the replicated bias is added after the reduction.
class RowParallelLinear {
 public:
  // reduce = false: forward returns this rank's partial sum (with the bias on rank 0 only, so that the
  // caller's sum over the group has it once).
  RowParallelLinear(ParameterSet& params, const std::string& prefix, int64_t in, int64_t out, bool bias,
                    float init_std, const parallel::TensorParallelContext& tp, DType gemm_input_type = DType::F32,
                    bool reduce = true);
  // x [tokens, in / tp] -> y [tokens (/tp when sequence parallel), out] (x_rounded as above).
  Tensor forward(const Tensor& x, bool x_rounded = false) const;
  // dy shaped like y -> dx [tokens, in / tp]; accumulates weight/bias gradients.
  Tensor backward(const Tensor& dy, const Tensor& x, bool x_rounded = false) const;

  Parameter* weight() const { return weight_; }
  Parameter* bias() const { return bias_; }  // null without one
  // Whether forward's output on this rank includes the bias (reduce = false: tensor rank 0's only).
  bool output_has_bias() const { return bias_ && (reduce_ || tp_.rank() == 0); }

 private:
  const parallel::TensorParallelContext& tp_;
  const ParameterSet* params_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  int64_t in_local_, out_;
  DType input_type_;
  bool reduce_;
};

class Norm {
 public:
  // Under sequence parallelism each rank normalises its own rows, so the weight gradients are partial
  // sums over the tensor group (ParameterSpec::sequence_parallel_grad).
  // width: the normalised dimension (0: the hidden size; a head's for --qk-layernorm). x may be any
  // shape of rows * width elements.
  Norm(ParameterSet& params, const std::string& prefix, const ModelConfig& config, bool sequence_parallel,
       int64_t width = 0);
  // y, mean (LayerNorm only) and rstd are allocated here.
  // round_output: y rounded to this type as it is written (it feeds only GEMMs). y_type: F32, or on a
  // GPU round_output itself, y then being made as the 16-bit tensor a GEMM reads (no fp32 copy).
  void forward(const Tensor& x, Tensor& y, Tensor& mean, Tensor& rstd, DType round_output = DType::F32,
               DType y_type = DType::F32) const;
  // x += residual, then forward(x, ...), in one pass (a residual connection followed by this norm): the
  // same bits as kernels::add_into(x, residual) then forward.
  void forward_after_residual(const Tensor& x, const Tensor& residual, Tensor& y, Tensor& mean, Tensor& rstd,
                              DType round_output = DType::F32, DType y_type = DType::F32) const;
  // Adds the input gradient into dx.
  void backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& dx) const;

 private:
  Normalization kind_;
  float eps_;
  int64_t hidden_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

}  // namespace tessera::model
