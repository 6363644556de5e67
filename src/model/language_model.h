// The model seam: what the trainer, the pipeline executor, checkpoints, evaluation and generation see
// of a model. A LanguageModelChunk is one pipeline chunk of any model family (Megatron's model with
// pre_process / post_process); build_model_chunk (model/model_factory.h) makes one from a ModelConfig.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/modules.h"

namespace tessera::model {

// A micro-batch as the data pipeline produces it: sample-major [batch, seq].
struct MicroBatch {
  Tensor tokens;     // int32 [batch, seq]
  Tensor labels;     // int32 [batch, seq]: the next tokens
  Tensor loss_mask;  // fp32 [batch, seq]: 1 where the token counts in the loss
  Tensor positions;  // int32 [batch, seq], optional (default 0..seq-1; --reset-position-ids restarts them)
  Tensor doc_start;  // int32 [batch, seq], optional: each position attends only from here on
                     // (--reset-attention-mask: the first position of its document)
  Tensor token_types;  // int32 [batch, seq], for models with token-type embeddings (num_tokentypes > 0)
  Tensor padding_mask;    // int32 [batch, seq], BERT: 1 on tokens, 0 on padding (keys attention ignores)
  Tensor sentence_order;  // int32 [batch], BERT's sentence-order label: 1 if the segments were swapped, -1 ignored
  Tensor choice_label;    // int32 [questions], multiple choice: the right choice of each question, whose
                          // choices are consecutive rows (batch = choices x questions)
  int64_t sample_offset = 0;  // global index of the first sample (keys dropout)
  // > 0: tokens and labels were found in [0, ids_checked_below) on the host before the batch moved to a
  // device (train/device_setup.h micro_batch_on), so a model of that vocabulary does not check them again
  // there: each check of a tensor on a GPU is a copy back to the host, a synchronisation inside the step.
  int64_t ids_checked_below = 0;
  // Where the batch moved to a device (micro_batch_on): its loss mask as it was on the host, sample-major
  // [batch, seq] and the whole sequence under context parallelism, so that counts of it need no copy back
  // (multi-token prediction's loss weights, when the sums stay on the device: LossSums::keeps_on).
  Tensor host_loss_mask;
};

// Which layers a chunk holds, and whether it has the embedding (first chunk) and the head (last).
struct ModelChunk {
  int64_t first_layer = 0;  // 0-based global layer number
  int64_t num_layers = -1;  // -1: all layers from first_layer on
  bool pre_process = true, post_process = true;
};

// Activation recomputation (Megatron's --recompute-granularity full with --recompute-method and
// --recompute-num-layers): the layers of a recomputed group keep only the group's input in forward and
// run their forward again in backward. Dropout masks are Philox values keyed by coordinates, so the
// recomputed forward is identical. (Selective recomputation of the core attention is what the tiled
// attention kernel always does: the seq x seq probabilities are never stored.)
enum class RecomputeMethod { None, Uniform, Block };
struct Recompute {
  RecomputeMethod method = RecomputeMethod::None;
  // Uniform: groups of this many consecutive layers of each chunk, each group keeping one input.
  // Block: the first this-many layers of each chunk are recomputed, one layer at a time.
  int64_t num_layers = 1;
};

// The losses of a forward, summed over the micro-batch's tokens: the LM loss (sum of loss * loss_mask)
// and whatever auxiliary losses the model adds (MoE load balancing, sentence order, ...), by name, each
// summed like the LM loss so that the trainer's division by the global batch's loss tokens gives the
// value it logs by name: the sentence-order loss and the KD term ("kd loss", β·τ²·KL) as they enter the
// objective, the MoE losses without their coefficients, averaged over the MoE layers, as Megatron logs
// them. (The objective is what the model's backward seeds with grad_scale; under distillation the LM
// loss enters it times --kd-alpha-ce, and is logged as the plain cross-entropy.)
struct LossSums {
  double lm = 0;
  std::vector<std::pair<std::string, double>> auxiliary;
  void add_auxiliary(const std::string& name, double value);
  // Set by a caller that reads the sums once after all its forwards (the trainer's schedule): on a GPU
  // the model then leaves its sums on the device, in `slots` (kernels::loss_totals), instead of copying each
  // back after each micro-batch's forward, and settle() reads them all with one copy: the LM loss is added
  // to slot 0 by the device (kernels::masked_loss_sum_into), each auxiliary loss's raw sum of a forward
  // (the MoE router's term sums, a multi-token prediction depth's masked loss sum) is written to a slot of
  // its own, and settle() finishes those on the host with the code the immediate path runs
  // (add_auxiliary(name, finish(raw)), in the order the slots were taken, i.e. the order of the immediate
  // path's calls). The CPU adds on the host as before, so its sums are the same bits either way; so are a
  // GPU's (the device adds the same doubles in the same order, and the rest is the same host code).
  bool sums_stay_on_device = false;
  // Tests only: the same path on the CPU too (the kernels' CPU side), to compare it with the host sums.
  bool device_sums_on_cpu_too = false;
  // Whether a forward on `device` leaves its sums there.
  bool keeps_on(Device device) const {
    return sums_stay_on_device && (device.type != DeviceType::CPU || device_sums_on_cpu_too);
  }
  // Where keeps_on(device): the LM loss's total (slot 0, a kernels::loss_total view).
  Tensor lm_total(Device device);
  // Where keeps_on(device): a fresh slot (0; one double in an int64 [1] view) for one raw sum the device
  // writes; settle() calls add_auxiliary(name, finish(its value)).
  Tensor auxiliary_slot(const std::string& name, Device device, std::function<double(double)> finish);
  void settle();
  struct PendingAuxiliary {
    std::string name;
    int64_t slot = 0;
    std::function<double(double)> finish;
  };
  Tensor slots;  // int64 [capacity] on the device: doubles, slot 0 the LM loss
  int64_t slots_used = 0;
  std::vector<PendingAuxiliary> pending;
  // How the MoE layers routed this rank's tokens of the micro-batch: routing entries (token, chosen
  // expert) per expert before the capacity, flat over every expert of every MoE layer in layer
  // order (MoeConfig::expert_offset), and the entries that capacity dropped, of all entries. `kept`
  // has the same layout: each expert's rows after the capacity (with --moe-pad-expert-input-to-capacity
  // the padding's too), Megatron's routing_map.sum(0), which the expert bias balances (train/expert_bias.h).
  struct Routing {
    std::vector<double> routed, kept;
    double dropped = 0, entries = 0;
    void add(const Routing& other);
  } routing;
};

// Everything a chunk's backward needs from its forward, for one micro-batch (owned by the caller).
class ChunkRecord {
 public:
  virtual ~ChunkRecord() = default;
  virtual int64_t bytes() const = 0;  // held from forward to backward
};

// Hooks into the flat parameter buffers (offsets as in ParameterSet) for overlapped communication.
struct ParamHooks {
  // Called before each part of a forward with the flat offset below which its parameters lie, so that
  // an overlapped parameter all-gather is waited for bucket by bucket.
  std::function<void(int64_t)> params_needed_below;
  // Called during backward each time every gradient at flat offset >= offset has received its last
  // contribution from this micro-batch (so data-parallel buckets can start reducing).
  std::function<void(int64_t)> grads_final_from;
};

// One layer's keys and values for incremental decoding, in blocks of a pool that the sequences decoded
// together share (as vLLM's paged attention and Megatron-Core's dynamic inference context):
// [blocks, block size, query groups on this rank, head dim].
struct KvCache {
  Tensor k, v;
};
// Every layer's pool of a chunk; a block number names the same block in each layer.
struct KvPool {
  std::vector<KvCache> layers;
  int64_t blocks = 0, block_size = 0;
};

// One sequence's part of a decoding step: its next tokens, after `past` tokens already in its caches;
// position p lies at row p % block_size of pool block blocks[p / block_size], and blocks cover
// past + tokens.size() positions. A step's activations hold the sequences' rows one after another.
struct DecodeStep {
  std::vector<int32_t> tokens;
  int64_t past = 0;
  std::vector<int32_t> blocks;
};

// The caches of one sequence decoded alone: a pool of one block of its capacity.
struct DecodeState {
  KvPool pool;
  int64_t length = 0;  // tokens fed so far
};

class LanguageModelChunk {
 public:
  virtual ~LanguageModelChunk() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const ModelChunk& chunk() const = 0;
  virtual void set_recompute(const Recompute& r) = 0;

  // Whether the model predicts the next token (GPT), so that generation and zero-shot evaluation apply;
  // a bidirectional encoder (BERT) does not.
  virtual bool causal_language_model() const { return true; }

  // The names of the auxiliary losses forward may add to LossSums (the same on every chunk of a model).
  virtual std::vector<std::string> auxiliary_loss_names() const { return {}; }

  // The word embedding tied to the output layer, where this chunk holds it: the first chunk's own, or
  // the last chunk's copy (ParameterSpec::tied_copy) when another chunk has the embedding; one parameter
  // where the chunk is both. Null when the chunk has neither end or the model unties the two.
  virtual Parameter* tied_word_embedding() const { return nullptr; }

  virtual std::unique_ptr<ChunkRecord> make_record() const = 0;
  // From batch.tokens on the first chunk, else from `input` (the previous chunk's output, [T (/tp under
  // sequence parallelism), hidden]). Returns the output activation, or on the last chunk an undefined
  // tensor after adding its losses to `losses`.
  virtual Tensor forward(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx, ChunkRecord& rec,
                         LossSums& losses, const ParamHooks& hooks = {}) const = 0;
  // Accumulates gradients of (grad_scale * the summed losses) into the parameters' grads from the
  // gradient of the chunk's output (ignored on the last chunk, which starts from the loss); returns
  // the gradient of its input (undefined on the first chunk). Consumes `rec`.
  virtual Tensor backward(ChunkRecord& rec, const Tensor& doutput, const ForwardContext& ctx, float grad_scale,
                          const ParamHooks& hooks = {}) const = 0;

  // Incremental decoding (inference, no sequence parallelism) of several sequences in one step: a pool
  // of `blocks` blocks of `block_size` positions; then one step of the sequences (every chunk takes their
  // tokens for their positions; the first embeds them, the others take the previous chunk's hidden
  // states `input` [Σ tokens, hidden]). Returns the hidden states for the next chunk, or on the last
  // chunk the logits over the padded vocabulary after each sequence's last token, [steps, padded vocab].
  virtual KvPool make_kv_pool(int64_t blocks, int64_t block_size) const = 0;
  virtual Tensor decode_step(const std::vector<DecodeStep>& steps, const Tensor& input, KvPool& pool) const = 0;

  // One sequence alone: an empty state for up to `capacity` tokens, then its next tokens (the last chunk
  // returns the logits after the last of them, [padded vocab]).
  DecodeState start_decoding(int64_t capacity) const { return {make_kv_pool(1, capacity), 0}; }
  Tensor decode(const std::vector<int32_t>& tokens, const Tensor& input, DecodeState& state) const;

  // Scoring (evaluation): a forward without dropout; the last chunk returns per row of the [seq, batch]
  // layout (label logit, log-sum-exp, arg-max id over the padded vocabulary) as [3 * rows], the
  // others their output for the next chunk.
  virtual Tensor score(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx) const = 0;

  // A distillation teacher's forward (the whole model: a chunk that is both first and last), without
  // dropout, losses or a record for backward: this rank's vocabulary shard of the logits [T, padded
  // vocabulary / tp], rows in the [seq, batch] order of the LM head's. Families without a next-token
  // head refuse.
  virtual Tensor logits(const MicroBatch& batch, const ForwardContext& ctx) const;
};

}  // namespace tessera::model
