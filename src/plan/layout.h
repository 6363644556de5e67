// A parallel layout and the memory features of a training run, as `tessera train` (Megatron-LM) takes
// them: tp x cp x pp x dp devices, v model chunks per pipeline rank, context parallelism (each sequence
// split over cp ranks, attention around their ring), sequence parallelism, activation
// recomputation, the distributed optimizer, precision, micro and global batch; and for a mixture of
// experts the expert layout of Megatron-Core's "parallel folding": the expert layers run on the same
// devices as etp x ep x edp x pp, edp = devices / (etp x ep x pp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "pipeline/schedules.h"

namespace tessera::plan {

enum class Recompute { None, Selective, Full };
enum class Precision { Fp32, Bf16, Fp16 };

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  // Context parallelism (--context-parallel-size): each sequence cut into 2 cp chunks, rank i of the cp
  // group holding chunks i and 2 cp - 1 - i (seq / cp tokens), attention by ring attention
  // (model/ring_attention.h). Ranks are laid out as the trainer's tp-cp-ep-dp-pp: the cp group has
  // stride tp, the data-parallel group stride tp x cp, pipeline neighbours tp x cp x dp; dense gradients
  // are reduced (and the distributed optimizer's state sharded) over dp x cp.
  int cp = 1;
  // Experts: each of the ep expert-parallel ranks holds E / ep experts of a layer, each expert's MLP split
  // over etp ranks (0: tp, --expert-tensor-parallel-size's default). Ignored by a dense model.
  int ep = 1, etp = 0;
  bool allgather_dispatcher = false;  // --moe-token-dispatcher-type allgather (else alltoall)
  int virtual_stages = 1;  // v: model chunks per pipeline rank (> 1: interleaved 1F1B)
  bool sequence_parallel = false;
  int64_t micro_batch_size = 1, global_batch_size = 1;
  Recompute recompute = Recompute::None;
  int recompute_num_layers = 1;  // --recompute-method uniform: layers per recomputed group
  bool distributed_optimizer = false;
  bool overlap_grad_reduce = false, overlap_param_gather = false;
  int64_t ddp_bucket_size = 40000000;  // elements per data-parallel bucket (Megatron's default)
  Precision precision = Precision::Bf16;
  bool flash_attention = false;  // attention without materialised s x s scores (Tessera's CPU kernel)
  // TeraPipe (--pipeline-token-slices): the lengths each sequence is cut into, in order (summing to the
  // sequence length); empty: whole micro-batches flow through the pipeline. Needs virtual_stages = 1.
  std::vector<int64_t> token_slices;
  // Zero-bubble pipelines (--enable-zero-bubble: ZB-H1, v = 1; --zero-bubble-v-schedule: ZB-V, v = 2 in a
  // V, so the output layer sits on pipeline rank 0): each backward split into B and W (pipeline/zero_bubble.h).
  pipeline::ZeroBubble zero_bubble = pipeline::ZeroBubble::Off;
  // --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: the embedding / the
  // loss counts as a layer when the layers split over the p x v model chunks (pipeline::LayerSplit).
  bool embedding_in_split = false, loss_in_split = false;

  int devices() const { return tp * cp * pp * dp; }
  // How the model's layers split over the model chunks (chunk_layer_numbers); the layers split evenly.
  pipeline::LayerSplit layer_split(int64_t num_layers) const {
    return {static_cast<int>(num_layers), -1, -1, embedding_in_split, loss_in_split};
  }
  // Tokens of one sequence that a rank holds: seq / cp (exactly seq when cp = 1).
  double sequence_per_rank(int64_t seq_length) const { return static_cast<double>(seq_length) / cp; }
  int gradient_group() const { return dp * cp; }  // the ranks that reduce a dense gradient
  int expert_tp() const { return etp > 0 ? etp : tp; }
  int edp() const { return devices() / (expert_tp() * ep * pp); }  // the expert-data-parallel size
  int64_t micro_batches() const { return global_batch_size / (micro_batch_size * dp); }  // m per replica
  int activation_bytes() const { return precision == Precision::Fp32 ? 4 : 2; }
  // Bytes per element of the gradient buffer that is reduced: fp32 main gradients except fp16 (Megatron
  // accumulates and all-reduces in fp32 under bf16, in fp16 under fp16 unless told otherwise).
  int gradient_bytes() const { return precision == Precision::Fp16 ? 2 : 4; }
};

// The pipeline schedule the layout runs (stages, micro-batches per replica, chunks, slices, zero bubble).
pipeline::ScheduleShape schedule_shape(const Layout& l);
// The pipeline rank holding the output layer and the loss: the last, or rank 0 under ZB-V.
int head_stage(const Layout& l);

// Why a layout cannot run the model on `devices` devices, or "" when it can. `family` is set to the kind of
// rule broken: "divisibility" (heads, layers, vocabulary, sequence not divisible), "batch" (global batch
// vs micro batch x dp, interleaving's micro-batch rule), "devices" (tp x cp x pp x dp != devices) or
// "experts" (the trainer's expert-parallel rules: etp x ep x pp dividing the devices, each MoE layer's
// experts divisible by ep, the expert width by etp, the shared expert's by tp, sequence parallelism
// under tp > 1; ep > 1 without experts). Context parallelism (cp > 1) needs the sequence divisible by
// 2 cp, with sequence parallelism seq / cp divisible by tp, and (as the trainer) a dense model without
// token slices ("divisibility").
std::string layout_problem(const model::ModelConfig& c, const Layout& l, int devices, std::string* family = nullptr);

std::string to_string(Recompute r);
std::string to_string(Precision p);
// "tp8 pp64 dp6 v1 mbs1 gbs3072 recompute=full", with " ep8 etp1" after dp when ep > 1 or etp is set
// and " slices=32x64" at the end with token slices; " cp2" after tp when cp > 1; " zb-h1" or " zb-v" after
// v with a zero-bubble schedule, then " embedding-in-split" and " loss-in-split" with the counted split.
std::string describe(const Layout& l);
// The token slices, runs of equal lengths as count x length: "32x64", "22x80,4x72", "40,16,8"; "" when
// there are none.
std::string token_slices_string(const Layout& l);

// The model as seen by one tensor-parallel rank: the vocabulary padded for this tp (Megatron pads to a
// multiple of make_vocab_size_divisible_by x tp).
model::ModelConfig config_for_tp(const model::ModelConfig& c, int tp, int64_t make_vocab_size_divisible_by);

}  // namespace tessera::plan
