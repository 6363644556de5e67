// Pipeline schedules as explicit per-rank lists of operations (Megatron's
// forward_backward_no_pipelining, forward_backward_pipelining_without_interleaving and
// forward_backward_pipelining_with_interleaving, written out instead of executed). The executor runs
// these lists; tests check their invariants; the planner simulates them.
//
// The model is cut into p * v chunks. Chunk c of pipeline rank r (c < v) is model chunk c * p + r, so a
// micro-batch's forward runs rank 0 chunk 0, rank 1 chunk 0, ..., rank p-1 chunk 0, rank 0 chunk 1, ...
//
// TeraPipe (Li et al., ICML 2021; --pipeline-token-slices): with n > 1 token slices each micro-batch is cut
// along its tokens into n slices, and every op names its slice. A slice is the unit that flows between
// stages: slice i leaves stage k while stage k works on slice i + 1, since causal attention needs only the
// earlier tokens (kept in the stage's key/value caches). Backward runs a micro-batch's slices in reverse, as
// the gradients of the cached keys and values flow from later slices to earlier ones.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tessera::pipeline {

enum class OpKind {
  RecvForward,   // the input activation of (micro-batch, chunk) from the previous model chunk
  Forward,
  SendForward,   // the output activation to the next model chunk
  RecvBackward,  // the gradient of the output from the next model chunk
  Backward,      // the whole backward; in a zero-bubble schedule B, the gradient of the input only
  SendBackward,  // the gradient of the input to the previous model chunk
  BackwardWeight,  // zero-bubble schedules' W: the weight gradients of a (micro-batch, chunk) whose B has run
};

// Zero-bubble pipelines (pipeline/zero_bubble.h): ZB-H1, 1F1B's placement with W split off; ZB-V, two
// chunks per rank in a V (rank r holds model chunks r and 2p - 1 - r).
enum class ZeroBubble { Off, H1, V };

struct Op {
  OpKind kind;
  int micro_batch;
  int chunk;      // model chunk on this rank, 0 .. v-1
  int slice = 0;  // token slice of the micro-batch, 0 .. n-1 (TeraPipe); 0 when unsliced
  bool operator==(const Op&) const = default;
};

struct ScheduleShape {
  int stages = 1;         // p: pipeline-parallel size
  int micro_batches = 1;  // m: micro-batches per global batch on one data-parallel replica
  int chunks = 1;         // v: model chunks per rank (virtual pipeline stages); > 1 selects interleaving
  int slices = 1;         // n: token slices per micro-batch (TeraPipe); > 1 needs v = 1
  ZeroBubble zero_bubble = ZeroBubble::Off;  // H1: v = 1; V: v = 2 in a V; neither with token slices
  int max_pending_weight_passes = 0;         // zero bubble: W passes a rank may defer at once (0: no bound)
};

// Throws an Error naming the rule unless the shape is schedulable: p, m, v >= 1; v > 1 needs p > 1
// and m a multiple of p (Megatron's interleaving constraint); n >= 1, and n > 1 needs v = 1; zero bubble:
// H1 needs v = 1, V needs v = 2 and p > 1, and neither takes token slices.
void validate_schedule(const ScheduleShape& shape);

// The operations of pipeline rank `stage`, in the order it runs them. forward_only: evaluation (every
// micro-batch forward through every chunk, no backward).
//   p = 1: forward and backward of each micro-batch in turn (gradient accumulation).
//   v = 1: 1F1B: min(p - stage - 1, m) warm-up forwards, then one forward one backward, then cool-down.
//   v > 1: Megatron's interleaved 1F1B over the m * v (micro-batch, chunk) pairs.
//   n > 1: 1F1B over the m * n (micro-batch, slice) units: forwards in the order (0, 0), (0, 1), ...,
//          (0, n-1), (1, 0), ...; backwards micro-batch by micro-batch with the slices in reverse. The
//          warm-up is min(p - stage - 1 + n - 1, m n) slice forwards: the last stage needs a micro-batch's
//          every slice before that micro-batch's first backward (slice n-1), and each earlier stage runs one
//          slice ahead of the next, as in 1F1B. n = 1 is 1F1B exactly.
//   zero bubble: pipeline/zero_bubble.h's lists, built with unit costs (F = B = W).
// Each Forward is preceded by its RecvForward unless it is the model's first chunk, and followed by its
// SendForward unless it is the last; likewise for Backward with RecvBackward/SendBackward.
std::vector<Op> build_schedule(const ScheduleShape& shape, int stage, bool forward_only = false);

// Where model chunk `chunk` of rank `stage` sends its output: (stage + 1, chunk), or (0, chunk + 1) from
// the last rank. Its input comes from the previous chunk: (stage - 1, chunk), or (p - 1, chunk - 1). In
// ZB-V's V the second chunks run backwards: (p - 1, 0) feeds (p - 1, 1), which feeds (p - 2, 1), ...
struct ChunkId {
  int stage, chunk;
  bool operator==(const ChunkId&) const = default;
};
// The position of a rank's chunk in the model, 0 .. p v - 1 (c.chunk * p + c.stage; in a V, chunk 1 of rank
// r is 2p - 1 - r), and the rank's chunk at a position.
int model_chunk_index(const ScheduleShape& shape, ChunkId c);
ChunkId chunk_at(const ScheduleShape& shape, int model_chunk);
ChunkId next_chunk(const ScheduleShape& shape, ChunkId c);
ChunkId previous_chunk(const ScheduleShape& shape, ChunkId c);
bool is_first_chunk(const ScheduleShape& shape, ChunkId c);  // holds the embedding
bool is_last_chunk(const ScheduleShape& shape, ChunkId c);   // holds the output layer and the loss

// The largest number of (micro-batch, chunk, slice) forwards whose backward has not yet run, that `stage`
// holds at once under the schedule: min(p - stage, m) for 1F1B; Megatron's warm-up + 1 when
// interleaved; min(p - stage + n - 1, m n) slices with n token slices. (Counts from the op list; see the
// tests for the closed forms.)
int peak_in_flight(const std::vector<Op>& ops);
// The most bytes of activation records held at once when a forward of chunk c keeps bytes_of_chunk(c)
// until its backward: the memory peak when chunks keep different amounts (the last one holds the logits).
double peak_in_flight_bytes(const std::vector<Op>& ops, const std::function<double(int chunk)>& bytes_of_chunk);
// The schedule's closed-form maximum: the number the docs and the planner quote.
int theoretical_peak_in_flight(const ScheduleShape& shape, int stage);
// The pipeline bubble as a fraction of the ideal compute time: (p - 1) / (v * m), and (p - 1) / (m * n)
// with n equal token slices (TeraPipe: the pipeline fills and drains by slices, not micro-batches).
double theoretical_bubble_fraction(const ScheduleShape& shape);

// The first global layer (0-based) and number of layers of chunk `chunk` on `stage`.
struct LayerRange {
  int first, count;
};
// How the layers are cut over the p stages: evenly, or Megatron-Core's uneven split, `first` layers on the
// first stage and `last` on the last (-1: not given; --decoder-first/last-pipeline-num-layers), the rest
// evenly over the stages between. Each stage's layers split evenly over its v chunks, and chunk k of every
// stage comes after chunk k - 1 of all of them (Megatron-Core's offsets), so with an even split chunk j of
// stage r holds model chunk j * p + r.
//
// Or Megatron-Core's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split
// (`embedding`, `loss`): the embedding (the loss) counts as one more layer before (after) the model's, and
// those num_layers + 1 or + 2 split evenly over the p x v model chunks, so the first (last) model chunk
// builds one transformer layer fewer, possibly none. Not combined with first/last (Megatron-Core refuses).
struct LayerSplit {
  int num_layers = 0;
  int first = -1, last = -1;
  bool embedding = false, loss = false;
  bool uneven() const { return first >= 0 || last >= 0; }
  bool accounts() const { return embedding || loss; }
  // The layers split evenly: the transformer layers plus the embedding and loss where they count.
  int counted_layers() const { return num_layers + embedding + loss; }
};
int stage_layer_count(const LayerSplit& split, int stages, int stage);
// Throws an Error naming the flags unless the split gives every stage and chunk a whole number of layers.
void validate_layer_split(const LayerSplit& split, const ScheduleShape& shape);
LayerRange chunk_layers(const LayerSplit& split, const ScheduleShape& shape, ChunkId c);
// The even split of num_layers.
inline void validate_layer_split(int num_layers, const ScheduleShape& shape) {
  validate_layer_split(LayerSplit{num_layers}, shape);
}
inline LayerRange chunk_layers(int num_layers, const ScheduleShape& shape, ChunkId c) {
  return chunk_layers(LayerSplit{num_layers}, shape, c);
}

// Runs every rank's op list against the others with the given costs per op: sends never block; a
// receive waits for its matching send (and then p2p_seconds more). Throws an Error naming each rank's
// blocked operation when the lists deadlock.
struct OpCosts {
  // Per (micro-batch, chunk); a slice costs 1/n of it. Where the schedule splits the backward (zero
  // bubble), backward_seconds is B's and weight_seconds W's.
  double forward_seconds = 1, backward_seconds = 2, weight_seconds = 0;
  double p2p_seconds = 0;
};
struct SimulatedRun {
  double makespan = 0;                  // when the last rank finishes
  std::vector<double> busy_seconds;     // per rank: time in Forward and Backward
  std::vector<std::vector<double>> start;  // per rank, per op: when it started
};
SimulatedRun simulate_schedule(const ScheduleShape& shape, const OpCosts& costs, bool forward_only = false);
// Whether busy_seconds counts an op: Forward, Backward and BackwardWeight compute; the rest communicate.
bool is_compute(const Op& op);
// The same for given op lists, one per rank.
SimulatedRun simulate_ops(const ScheduleShape& shape, const std::vector<std::vector<Op>>& ops, const OpCosts& costs);

// "F3.1" = forward of micro-batch 3 on chunk 1, "RB", "SF", "W3.1" (zero bubble's W), ...; "F3.0s2" = its token slice 2 (slice 0 of a
// sliced schedule prints as the unsliced op).
std::string to_string(const Op& op);

}  // namespace tessera::pipeline
