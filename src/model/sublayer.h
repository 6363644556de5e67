// The slots of a transformer layer (Megatron-Core's TransformerLayerSubmodules): the layer owns the
// norms, the dropout and the residual connections; a slot is the computation between them, on the
// normalised residual stream. Self-attention fills one slot and a feed-forward module (dense MLP, a
// mixture of experts, ...) the other; a TransformerLayerSpec says which.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/decode_attention.h"
#include "model/language_model.h"
#include "model/saved_tensors.h"

namespace tessera::model {

// What a slot's computations see besides its input.
struct SublayerContext {
  const ForwardContext& ctx;
  const Tensor& positions;  // int32 [T] (rotary embeddings)
};

// Where the rows of a decoding step are: their positions and, sequence after sequence, each one's rows
// and pool blocks (from its DecodeStep).
struct DecodeLayout {
  Tensor positions;  // int32 [rows]
  std::vector<kernels::PagedRows> sequences;
};

class Sublayer {
 public:
  virtual ~Sublayer() = default;
  virtual std::unique_ptr<SavedTensors> make_record() const = 0;
  // x [T (/tp under sequence parallelism), hidden] -> y shaped like x (before dropout and residual).
  // x_rounded: x holds values of the GEMM input type already (kernels::GemmArgs::a_rounded).
  virtual Tensor forward(const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& rec) const = 0;
  // dy -> dx, given the forward's x; accumulates parameter gradients. rec's activations have been widened
  // to fp32, but for those it lists as GEMM inputs (SavedTensors::visit_gemm_inputs), which a GPU keeps
  // in 16 bits, as it may x (takes_16bit_input); rec_rounded: they hold values of the GEMM input type
  // (they were stored in it).
  virtual Tensor backward(const Tensor& dy, const Tensor& x, bool x_rounded, const SublayerContext& sc,
                          SavedTensors& rec, bool rec_rounded) const = 0;
  // Inference on a decoding step's rows (no dropout, no record), x [rows, hidden]. `cache` is the layer's
  // key/value pool, where attention stores the step's keys and values; the other slots ignore it.
  virtual Tensor decode(const Tensor& x, const DecodeLayout& layout, KvCache& cache) const = 0;
  // The slot's part of a layer's decoding pool of `blocks` blocks of `block_size` positions (attention's
  // keys and values).
  virtual void add_to_kv_cache(int64_t blocks, int64_t block_size, KvCache& cache) const {}
  // Whether forward and backward take x as a 16-bit tensor of the GEMM input type (every reader of x is a
  // linear layer, whose GEMMs read it as it is on a GPU: kernels::gemm_input). Where so, the layer keeps
  // its pre-LN norm's output in 16 bits from forward to backward on a GPU (no fp32 copy); a slot with
  // another reader (MoE's router and token gather) gets fp32.
  virtual bool takes_16bit_input() const { return false; }
};

// Builds a slot of layer `layer_number` (1-based, global) whose parameters are named `prefix` + ...
using SublayerBuilder = std::function<std::unique_ptr<Sublayer>(
    const ModelConfig& config, int64_t layer_number, const std::string& prefix, ParameterSet& params,
    const parallel::TensorParallelContext& tp)>;

struct TransformerLayerSpec {
  SublayerBuilder self_attention;  // parameters under "<layer>.self_attention."
  SublayerBuilder mlp;             // parameters under "<layer>.mlp."
  // The auxiliary losses the slots add to ForwardContext::losses in forward (each summed over the
  // tensor group, so every tensor rank adds the same value); their backward seeds them with
  // ForwardContext::grad_scale.
  std::vector<std::string> auxiliary_loss_names;
  // Parameter names start "<block>.layers.<n>.": Megatron-Core's "decoder" (GPT) or "encoder" (BERT).
  std::string block = "decoder";
};

// Output projections start smaller, std / sqrt(2 * layers), as Megatron's scaled_init_method_normal.
float output_init_std(const ModelConfig& c);

}  // namespace tessera::model
