// The plan of one layout (memory per rank, iteration time split into its parts, throughput) and the
// search over all layouts of a model on a cluster.
#pragma once

#include <string>
#include <vector>

#include "model/config.h"
#include "plan/cluster.h"
#include "plan/layout.h"
#include "plan/memory_model.h"
#include "plan/pipeline_simulator.h"

namespace tessera::plan {

// Which FLOPs count as useful work in TFLOP/s per device:
//   Megatron: num_floating_point_operations of today's Megatron-LM (and `tessera train`'s log line),
//             forward + backward, no recomputation: 72 B s l h^2 (...) for a GPT;
//   PTD-P:    the PTD-P paper's 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), which counts the recomputed
//             forward of full activation recomputation (the unit of its Table 1 and of Shoeybi et al.).
enum class FlopsFormula { Megatron, Ptdp };
double ptdp_flops_per_iteration(const model::ModelConfig& c, int64_t global_batch);

struct IterationTime {
  double compute = 0, tensor_parallel = 0, pipeline_p2p = 0, pipeline_bubble = 0, data_parallel = 0, optimizer = 0;
  double expert_parallel = 0;  // MoE layers' token dispatch and combine (all-to-all over ep, etp gathers)
  double context_parallel = 0;  // the ring's key/value exchange not hidden by the blocks' attention (cp > 1)
  double total() const {
    return compute + tensor_parallel + expert_parallel + context_parallel + pipeline_p2p + pipeline_bubble +
           data_parallel + optimizer;
  }
};

struct Plan {
  model::ModelConfig config;  // the vocabulary padded for the layout's tp
  Layout layout;
  ClusterSpec cluster;
  std::vector<MemoryBreakdown> memory;  // per pipeline stage (every tensor and data rank of a stage alike)
  int peak_memory_stage = 0;
  bool fits = false;                    // the largest stage fits in device memory
  IterationTime time;                   // of the rank that finishes the iteration last
  int critical_stage = 0;
  double model_flops = 0;               // per iteration, by the chosen formula
  double hardware_flops = 0;            // per iteration, what the devices execute (recomputation included)
  double tflops_per_device = 0;         // model_flops / (time * devices) / 1e12
  double hardware_tflops_per_device = 0;
  double mfu = 0;                       // model FLOP/s per device over peak
  double tokens_per_second = 0;
  double theoretical_bubble = 0;        // (p - 1) / (v m), to print beside the simulated one
  PipelineRun pipeline;                 // the simulated iteration (events when asked for)
  double peak_memory() const { return memory[peak_memory_stage].total(); }
};

struct PlanOptions {
  FlopsFormula flops_formula = FlopsFormula::Megatron;
  bool record_timeline = false;  // keep the simulated ops for a trace
  bool memory_only = false;      // skip the simulation (search rejects layouts that do not fit first)
};

// Throws an Error naming the rule when the layout is invalid for the model and cluster.
Plan make_plan(const model::ModelConfig& c, const Layout& l, const ClusterSpec& cluster, const PlanOptions& options);

// Every layout of `devices` = tp x pp x dp for the model: tp over the divisors of the head count (and the
// device count), pp over those of the layer count, v over those of the layers per stage, micro-batch
// sizes 1, 2, 4, ... up to the batch per replica; each pipelined layout with v 1 also as ZB-H1 and with
// v 2 also as ZB-V (zero-bubble schedules, pipeline/zero_bubble.h). The memory features (recomputation, sequence
// parallelism, distributed optimizer, precision) and the global batch are the base layout's. For an
// MoE model also ep over the divisors of every MoE layer's experts (with etp x ep x pp dividing the
// devices) and etp over {1, tp}, unless `experts` fixes them; and sequence parallelism is on whenever
// tp > 1, as MoE under tensor parallelism requires. Each pipelined layout (pp > 1, v = 1) is also
// planned with TeraPipe's token slices as its dynamic program picks them (plan/token_slicing_price.h), when it
// cuts the sequence. Context parallelism: cp over the divisors of devices / tp that cut the sequence into
// 2 cp chunks and leave each rank at least kSearchMinContextTokens tokens (cp 1 always; for an MoE model
// only when dropless), or only the fixed value; cp x tp x pp x dp = devices, ep folded over tp x cp x dp.
struct ExpertSearch {
  int ep = 0, etp = 0;  // > 0: only this value (--expert-model-parallel-size, --expert-tensor-parallel-size)
  int cp = 0;           // > 0: only this context-parallel size (--context-parallel-size)
};
// The fewest tokens of a sequence the search leaves a rank under cp > 1. Megatron applies context
// parallelism to long sequences (8k tokens and more); a shorter share makes the ring's steps as short as
// its per-hop latency and the kernels' floors, and searching it would multiply every search's layouts
// for sequences that fit without it.
inline constexpr int64_t kSearchMinContextTokens = 2048;
struct Rejected {
  Layout layout;
  std::string family;  // "memory", "divisibility", "batch", "experts"
  std::string reason;
};
struct SearchResult {
  std::vector<Plan> ranked;  // fitting layouts, best predicted throughput first
  std::vector<Rejected> rejected;
};
SearchResult search_layouts(const model::ModelConfig& c, const Layout& base, const ClusterSpec& cluster,
                            const PlanOptions& options, int64_t make_vocab_size_divisible_by,
                            const ExpertSearch& experts = {});

}  // namespace tessera::plan
