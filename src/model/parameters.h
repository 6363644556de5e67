// Parameters and their gradients live in two flat fp32 buffers; each parameter is a named view into
// them. Flat buffers are what data-parallel buckets, the distributed optimizer and checkpoints slice.
// Initial values are a pure function of (seed, parameter name, element index), so they do not depend on
// the order in which parameters are created (or, later, on how a parameter is sharded).
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/tensor.h"
#include "kernels/shard_layout.h"

namespace tessera::model {

enum class Init { Normal, Zeros, Ones };

// Which part of the full parameter this rank holds. The full tensor is seen as `global_view` (for
// example [2, F, H] for a SwiGLU fc1 weight of [2F, H], so that a shard of both halves is one range)
// and the rank holds [offset, offset + length) along dimension `dim`. dim < 0: the whole tensor.
struct Sharding {
  Shape full_shape;   // the full tensor's shape
  Shape global_view;  // the full tensor seen in the shape the split is a range of
  int dim = -1;
  int64_t offset = 0, length = 0;

  bool sharded() const { return dim >= 0; }
  // The flat index in the full tensor of element `local_index` of the shard.
  int64_t global_index(int64_t local_index) const;
  // The same description for the kernels that place shard elements (kernels/shard_layout.h).
  kernels::ShardPlace place() const { return {global_view, dim, offset, length}; }
};

struct ParameterSpec {
  std::string name;  // Megatron-core naming, e.g. "decoder.layers.0.self_attention.linear_qkv.weight"
  Shape shape;       // of the tensor this rank holds
  Init init = Init::Normal;
  float std = 0.0f;           // for Init::Normal
  bool weight_decay = true;   // false for biases and norm weights, as Megatron
  Sharding sharding;          // tensor-parallel slice (whole tensor when not sharded)
  // Replicated across the tensor group but computed on sequence-parallel shards (norms, row-parallel
  // biases) or on the rank's own heads (--qk-layernorm's norms, whatever the sequence parallelism), so each
  // rank's gradient is a partial sum that must be all-reduced over the tensor group.
  bool sequence_parallel_grad = false;
  // Rows are entries of the (padded) vocabulary: a checkpoint loaded with another padding copies the
  // rows both paddings have (the word embeddings, an untied output layer).
  bool vocab_rows = false;
  // Held on the first and the last pipeline stage (the word embedding tied to the output layer): its
  // gradient is summed over the embedding group, and with the distributed optimizer it is a bucket of
  // its own so that both stages split it alike.
  bool shared_with_last_stage = false;
  // The last pipeline stage's copy of such a parameter: initialised like the original (same name), and
  // left out of gradient norms and checkpoints.
  bool tied_copy = false;
  // One expert's weight of a mixture-of-experts layer (reduced over the expert-data-parallel group).
  bool expert = false;
  // Which data-parallel group sums its gradient: dense parameters over data x context parallel ranks,
  // expert parameters over the expert-data-parallel ranks (Megatron-Core's "parallel folding").
  enum class GradReduce { DataParallel, ExpertDataParallel };
  GradReduce grad_reduce = GradReduce::DataParallel;
  // Read by GEMMs as a weight (the linear layers', the output layer's): what
  // ParameterSet::cache_rounded_weights keeps a rounded copy of.
  bool gemm_weight = false;
  // An MoE router's expert bias (--moe-router-enable-expert-bias), which is not trained: no gradient
  // reaches it and the optimizer leaves it as it is; once per global batch the trainer moves it by the
  // routing counts of its layer's experts, which start at this offset of LossSums::Routing::kept
  // (train/expert_bias.h). -1: a trained parameter.
  int64_t expert_bias_offset = -1;
  bool trained() const { return expert_bias_offset < 0; }

  Shape global_shape() const;  // the full tensor's shape
  // The same on every rank of the tensor group (not split over it): counted once in norms, saved once.
  bool replicated_in_tensor_group() const { return !sharding.sharded(); }
};

struct Parameter {
  ParameterSpec spec;
  int64_t offset = 0;  // element offset in the flat buffers
  Tensor value;
  Tensor grad;
};

class ParameterSet {
 public:
  // Declares a parameter; its tensors exist after allocate(). The returned pointer stays valid.
  Parameter* add(ParameterSpec spec);
  // Creates the flat buffers in declaration order and initialises every parameter from (seed, name).
  // with_grads = false: no gradient buffer (a model that only runs forward, a distillation teacher).
  void allocate(uint64_t seed, bool with_grads = true);

  bool allocated() const { return values_.defined(); }
  int64_t numel() const { return numel_; }
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }
  std::deque<Parameter>& params() { return params_; }
  const std::deque<Parameter>& params() const { return params_; }
  Parameter& get(const std::string& name);
  Parameter* find(const std::string& name);  // null when there is none
  void zero_grad() const { grads_.zero_(); }

  // Mixed precision on the fp32 kernels: a GEMM weight rounded to the 16-bit type once per step rather
  // than in each GEMM that reads it (the forward and the backward GEMM of every micro-batch). Off until
  // cache_rounded_weights(t). Whoever may have changed the values calls weights_changed() before the
  // next forward (the trainer: before every schedule it runs), and each copy is refreshed at its next
  // use, so after a distributed optimizer's parameter all-gather has been waited for.
  void cache_rounded_weights(DType t) { rounded_type_ = t; }
  DType rounded_value_type() const { return rounded_type_; }  // F32: no copies are kept
  void weights_changed() { ++weights_epoch_; }
  // p's values rounded to type t, or an undefined tensor where no rounded copy is kept for t (the GEMM
  // rounds then). The copy is of kernels::gemm_buffer_type: on a GPU a bf16 (fp16) tensor, cast once
  // per step for cuBLASLt's 16-bit kernels; on the CPU fp32 numbers that a 16-bit one can hold.
  Tensor rounded_value(const Parameter& p, DType t) const;
  // The memory of the rounded copies made so far (as they are kept), and of all there will be when each
  // element is kept in `storage` (kernels::gemm_buffer_type of the rounded type and the device).
  int64_t rounded_weight_bytes() const;
  int64_t gemm_weight_bytes(DType storage = DType::F32) const;

  // Decoding on fp32 weights: each GEMM weight also kept packed for kernels::packed_linear_forward, which
  // a decoding step's few rows multiply without oneDNN's per-call reorder (issue 40). Off until
  // keep_packed_weights(): a model loaded to serve or generate, whose weights then stay as loaded; like
  // the rounded copies, a copy is refreshed at its first use after weights_changed(). Doubles the
  // memory of the weights decoded with.
  void keep_packed_weights() { keep_packed_ = true; }
  // p's packed copy (made at the first call), or an undefined tensor when none are kept.
  Tensor packed_value(const Parameter& p) const;

 private:
  struct RoundedCopy {
    Tensor values;
    uint64_t epoch = 0;
  };
  std::deque<Parameter> params_;
  int64_t numel_ = 0;
  Tensor values_, grads_;
  DType rounded_type_ = DType::F32;
  uint64_t weights_epoch_ = 1;
  mutable std::map<const Parameter*, RoundedCopy> rounded_;
  bool keep_packed_ = false;
  mutable std::mutex packed_mutex_;  // eval and the server may decode from several threads
  mutable std::map<const Parameter*, RoundedCopy> packed_;
};

// The full tensor of a parameter split over `group` (every rank holding the slice its spec describes,
// at offset rank * length): gathers the slices and puts each element in its global place.
// Collective over group; for an unsplit parameter it returns a copy of `local`.
Tensor gather_full_tensor(const ParameterSpec& spec, const Tensor& local, comm::ProcessGroup& group);

// Fills `out` with the initial value of parameter `spec` for the given seed.
void initialize_parameter(const ParameterSpec& spec, uint64_t seed, const Tensor& out);

}  // namespace tessera::model
