// How many bytes of activations a transformer layer keeps for its backward, per micro-batch: the
// formulas of Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
// Models", section 4), and the same derivation for what Tessera stores.
//
// The paper counts 16-bit activations and 1-byte dropout masks: per layer s·b·h·(34 + 5·a·s/h), of which
// 5·a·s²·b are the attention probabilities, their dropout mask and output. Tessera stores 4-byte fp32
// activations, regenerates dropout masks from Philox instead of storing them, and its tiled attention
// never stores the s×s probabilities (it recomputes them in backward, which is what selective
// recomputation does), so per token it keeps: the two norm inputs and outputs (4h, and the norm
// statistics), q, k, v and the attention output ((2a + 2g)·d / t), the log-sum-exp (a / t), and the MLP's
// fc1 output and activation (F (2F for SwiGLU) + F) / t. Under sequence parallelism the norm terms are
// split over the t tensor ranks too. Under mixed precision (ModelConfig::params_dtype) the activations
// take 2 bytes and the statistics stay 4; a recomputed group's kept input stays fp32.
#pragma once

#include <algorithm>

#include "model/language_model.h"

namespace tessera::model {

struct ActivationLayout {
  int64_t micro_batch = 1, seq = 0;
  int64_t tensor_parallel = 1;
  bool sequence_parallel = false;
  bool selective_recompute = false;  // the paper's selective recomputation (drops the 5as/h term)
  // An MoE layer's experts: split over ep ranks, each expert's MLP over etp ranks.
  int64_t expert_parallel = 1, expert_tensor_parallel = 1;
};

// Multi-Latent Attention's record per token (ModelConfig::mla): its latents on the rank's rows and the
// heads' tensors on the rank's heads; e is the bytes of an activation.
double mla_attention_record_bytes(const ModelConfig& c, const ActivationLayout& l, double e);

// The paper's bytes per layer per micro-batch with no (or selective) recomputation.
double korthikanti_layer_bytes(const ModelConfig& c, const ActivationLayout& l);
// The paper's bytes per layer kept under full recomputation: the layer input, 2·s·b·h (/t with SP).
double korthikanti_full_recompute_layer_bytes(const ModelConfig& c, const ActivationLayout& l);

// Tessera: bytes one layer's record holds for one micro-batch when it keeps everything: a dense layer's,
// and that of 1-based layer `layer_number`, whose feed-forward slot is MoE where c.moe gives it experts.
double layer_record_bytes(const ModelConfig& c, const ActivationLayout& l);
double layer_record_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t layer_number);
// Routed rows one rank sends to the experts of MoE layer `layer_number` per micro-batch, routing taken as
// balanced: T x k dropless (T = s b, / t under sequence parallelism), at most E x capacity with a
// capacity factor, exactly E x min(capacity, T) when padded to capacity. 0 for a dense layer.
double moe_routed_rows(const ModelConfig& c, const ActivationLayout& l, int64_t layer_number);
// What an MoE feed-forward slot's record keeps for one micro-batch (model/moe_layer.cc's MoeRecord), with
// R = moe_routed_rows and routing balanced (each rank receives as many rows as it sends, etp x R after the
// expert tensor group's all-gather): the router's fp32 logits [T, E], int32 indices and fp32 probabilities
// [T, k], load-balancing counts [groups, E] and jittered input [T, h]; each row's int32 token and slot
// and fp32 probability; the experts' input rows (etp R x h) and their outputs back here (R x h); each
// expert's fc1 output and activation (etp R x (fc1 + f) / etp), under --moe-grouped-gemm every local
// expert padded to the most rows any has (balanced: the same); the shared expert and the residual MLP as
// tensor-parallel MLPs over the gathered s b rows, and the residual form's two outputs and fp32 mixing
// logits [T, 2]. Activations take e bytes (16 bits under mixed precision), the rest 4.
double moe_record_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t layer_number);
// Zero bubble (pipeline/zero_bubble.h): what one layer's W pass holds from its B to its W for one
// micro-batch (model/weight_gradient_store.h): for each linear layer whose weight gradient is deferred,
// its input and its output's gradient, both fp32 (backward widened the kept activations) and whole
// sequences (s b rows: sequence parallelism gathers them): QKV, linear_proj, fc1 and fc2, and in an MoE
// layer each expert's fc1 and fc2 over its rows (padded under --moe-grouped-gemm) and the shared
// expert's and residual MLP's, and Multi-Latent Attention's projections (mla_weight_gradient_bytes).
// The router and the residual mixing weights stay in B.
double layer_weight_gradient_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t layer_number);
double mla_weight_gradient_bytes(const ModelConfig& c, const ActivationLayout& l);
// The same for the output layer of the last chunk: its fp32 logits' gradient shard and the gathered
// final-norm output.
double head_weight_gradient_bytes(const ModelConfig& c, const ActivationLayout& l);
// The same for the multi-token prediction modules of the last chunk: per module its layer's, its output
// layer's, and eh_proj's gathered [2h] input and output gradient.
double mtp_weight_gradient_bytes(const ModelConfig& c, const ActivationLayout& l);
// Tessera: bytes a layer input holds (what a recomputed group keeps).
double layer_input_bytes(const ModelConfig& c, const ActivationLayout& l);
// Tessera: bytes the records of a chunk of `layers` layers hold for one micro-batch under `r`: dense
// layers, or the 1-based layers first_layer, ..., first_layer + layers - 1 (MoE ones priced as such).
double chunk_record_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t layers, const Recompute& r);
double chunk_record_bytes(const ModelConfig& c, const ActivationLayout& l, int64_t first_layer, int64_t layers,
                          const Recompute& r);
// Elements of one layer's keys and values for one micro-batch of the whole sequence on one tensor rank
// (its query groups): the key/value cache each layer of a token-sliced pipeline keeps. Multi-Latent
// Attention caches each of its heads' up-projected key and value, max(q_head_dim, v_head_dim) wide.
inline double layer_kv_elements(const ModelConfig& c, int64_t micro_batch, int64_t tensor_parallel) {
  if (c.mla.enabled)
    return 2.0 * static_cast<double>(c.seq_length * micro_batch * (c.num_attention_heads / tensor_parallel) *
                                     std::max(c.mla.q_head_dim(), c.mla.v_head_dim));
  return 2.0 * static_cast<double>(c.seq_length * micro_batch * (c.num_query_groups / tensor_parallel) * c.kv_channels);
}
// Tessera: bytes a chunk's record holds besides its layers, per micro-batch: the positions (int32, every
// chunk), the tokens (int32, the first chunk) and on the last chunk the head: the final norm's input,
// output (fp32; sequence-sharded under sequence parallelism) and statistics, the labels and loss mask,
// this rank's vocabulary shard of the fp32 logits (cross-entropy writes dlogits into them in place, so
// they live until backward) and the log-sum-exp.
// With multi-token prediction a last chunk without the embedding keeps the tokens too (int32).
double chunk_extra_bytes(const ModelConfig& c, const ActivationLayout& l, bool first_chunk, bool last_chunk);
// Tessera: bytes the multi-token prediction modules (ModelConfig::mtp_num_layers) of the last chunk hold for
// one micro-batch: per module its layer's record (layer_record_bytes; never recomputed), and in fp32 the
// embedding, enorm's and hnorm's outputs, their concatenation, the final norm's input and output (7h per
// row, sequence-sharded under sequence parallelism) with the three norms' statistics, the rolled tokens,
// position ids, labels and loss mask, and its own logits shard and log-sum-exp (alive until backward, with
// the main head's).
double mtp_record_bytes(const ModelConfig& c, const ActivationLayout& l);
// The part of one module's record besides its layer's (mtp_record_bytes = N x (layer + this)).
double mtp_module_extra_bytes(const ModelConfig& c, const ActivationLayout& l);
// Multi-token prediction under token slices (model/sliced_multi_token_prediction.h), which runs the modules
// once over the whole sequence: what the last chunk holds beyond its slices' records from the last slice's
// forward to its backward (mtp_record_bytes, a copy of the main head's final-norm output h0 in fp32,
// sequence-sharded under sequence parallelism, and the whole sequence's int32 positions; the slices'
// records then keep no tokens), and h0's gradient, held from the last slice's backward, each slice's
// share freed by that slice's backward.
double sliced_mtp_sequence_bytes(const ModelConfig& c, const ActivationLayout& l);
double sliced_mtp_gradient_bytes(const ModelConfig& c, const ActivationLayout& l);

}  // namespace tessera::model
