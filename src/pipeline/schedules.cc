#include "pipeline/schedules.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "core/check.h"
#include "pipeline/zero_bubble.h"

namespace tessera::pipeline {
namespace {

// Appends the forward of (micro_batch, chunk) with its receive and send.
void add_forward(const ScheduleShape& s, int stage, int micro_batch, int chunk, int slice, std::vector<Op>& ops) {
  ChunkId c{stage, chunk};
  if (!is_first_chunk(s, c)) ops.push_back({OpKind::RecvForward, micro_batch, chunk, slice});
  ops.push_back({OpKind::Forward, micro_batch, chunk, slice});
  if (!is_last_chunk(s, c)) ops.push_back({OpKind::SendForward, micro_batch, chunk, slice});
}

void add_backward(const ScheduleShape& s, int stage, int micro_batch, int chunk, int slice, std::vector<Op>& ops) {
  ChunkId c{stage, chunk};
  if (!is_last_chunk(s, c)) ops.push_back({OpKind::RecvBackward, micro_batch, chunk, slice});
  ops.push_back({OpKind::Backward, micro_batch, chunk, slice});
  if (!is_first_chunk(s, c)) ops.push_back({OpKind::SendBackward, micro_batch, chunk, slice});
}

// Megatron's interleaved numbering of the m * v (micro-batch, chunk) pairs: groups of p micro-batches
// go through chunk 0, then chunk 1, ...; backward visits the chunks in reverse.
int virtual_chunk(const ScheduleShape& s, int k, bool forward) {
  int chunk = (k % (s.stages * s.chunks)) / s.stages;
  return forward ? chunk : s.chunks - 1 - chunk;
}
int virtual_micro_batch(const ScheduleShape& s, int k) {
  return (k / (s.stages * s.chunks)) * s.stages + k % s.stages;
}

// The number of forwards (of slices, with token slices) run before the first backward.
int warmup_forwards(const ScheduleShape& s, int stage) {
  const int total = s.micro_batches * s.chunks * s.slices;
  if (s.chunks == 1) return std::min(s.stages - stage - 1 + s.slices - 1, total);
  if (s.micro_batches == s.stages) return total;  // Megatron: all forwards first when m == p
  return std::min((s.stages - stage - 1) * 2 + (s.chunks - 1) * s.stages, total);
}

}  // namespace

void validate_schedule(const ScheduleShape& s) {
  TESSERA_CHECK(s.stages >= 1, "pipeline-parallel size ", s.stages, " must be at least 1");
  TESSERA_CHECK(s.micro_batches >= 1, "number of micro-batches ", s.micro_batches, " must be at least 1");
  TESSERA_CHECK(s.chunks >= 1, "virtual pipeline stages per rank ", s.chunks, " must be at least 1");
  TESSERA_CHECK(s.slices >= 1, "token slices per micro-batch ", s.slices, " must be at least 1");
  TESSERA_CHECK(s.slices == 1 || s.chunks == 1, "--pipeline-token-slices (", s.slices, " slices) cannot be combined "
                "with the interleaved schedule (", s.chunks, " virtual stages per rank) yet: TeraPipe's schedule "
                "here is 1F1B over the slices");
  if (s.zero_bubble != ZeroBubble::Off) {
    const bool v = s.zero_bubble == ZeroBubble::V;
    const char* flag = v ? "--zero-bubble-v-schedule" : "--enable-zero-bubble";
    TESSERA_CHECK(s.slices == 1, flag, " cannot be combined with --pipeline-token-slices");
    TESSERA_CHECK(s.chunks == (v ? 2 : 1), flag, v ? " places two model chunks on each rank in a V"
                                                   : " is 1F1B's placement, one model chunk per rank",
                  ", so --num-layers-per-virtual-pipeline-stage must not be given (", s.chunks,
                  " virtual stages per rank)");
    TESSERA_CHECK(!v || s.stages > 1, flag, " needs --pipeline-model-parallel-size > 1");
    TESSERA_CHECK(s.max_pending_weight_passes >= 0, "--zero-bubble-max-pending-backward=", s.max_pending_weight_passes,
                  " must not be negative (0: no bound)");
    return;
  }
  if (s.chunks > 1) {
    TESSERA_CHECK(s.stages > 1, "the interleaved schedule (", s.chunks,
                  " virtual stages per rank) needs --pipeline-model-parallel-size > 1");
    TESSERA_CHECK(s.micro_batches % s.stages == 0, "the interleaved schedule needs the number of micro-batches (",
                  s.micro_batches, " = global batch / (micro batch x data-parallel size)) to be a multiple of "
                  "--pipeline-model-parallel-size=", s.stages);
  }
}

std::vector<Op> build_schedule(const ScheduleShape& s, int stage, bool forward_only) {
  validate_schedule(s);
  TESSERA_CHECK(stage >= 0 && stage < s.stages, "pipeline stage ", stage, " is outside [0, ", s.stages, ")");
  if (s.zero_bubble != ZeroBubble::Off) return build_zero_bubble_schedules(s, ZeroBubbleCosts(), forward_only)[stage];
  std::vector<Op> ops;
  const int total = s.micro_batches * s.chunks * s.slices;
  // With v = 1 the numbering reduces to micro-batch k on chunk 0. With n token slices (v = 1) unit k is
  // slice k % n of micro-batch k / n, the slices of a micro-batch's backward in reverse.
  const int n = s.slices;
  auto forward = [&](int k) {
    if (n > 1) return add_forward(s, stage, k / n, 0, k % n, ops);
    add_forward(s, stage, virtual_micro_batch(s, k), virtual_chunk(s, k, true), 0, ops);
  };
  auto backward = [&](int k) {
    if (n > 1) return add_backward(s, stage, k / n, 0, n - 1 - k % n, ops);
    add_backward(s, stage, virtual_micro_batch(s, k), virtual_chunk(s, k, false), 0, ops);
  };
  if (forward_only) {
    for (int k = 0; k < total; ++k) forward(k);
    return ops;
  }
  const int warmup = warmup_forwards(s, stage), steady = total - warmup;
  for (int k = 0; k < warmup; ++k) forward(k);
  for (int k = 0; k < steady; ++k) {
    forward(warmup + k);
    backward(k);
  }
  for (int k = steady; k < total; ++k) backward(k);
  return ops;
}

int model_chunk_index(const ScheduleShape& s, ChunkId c) {
  if (s.zero_bubble == ZeroBubble::V && c.chunk == 1) return 2 * s.stages - 1 - c.stage;
  return c.chunk * s.stages + c.stage;
}
ChunkId chunk_at(const ScheduleShape& s, int j) {
  if (s.zero_bubble == ZeroBubble::V && j >= s.stages) return {2 * s.stages - 1 - j, 1};
  return {j % s.stages, j / s.stages};
}
ChunkId next_chunk(const ScheduleShape& s, ChunkId c) { return chunk_at(s, model_chunk_index(s, c) + 1); }
ChunkId previous_chunk(const ScheduleShape& s, ChunkId c) { return chunk_at(s, model_chunk_index(s, c) - 1); }
bool is_first_chunk(const ScheduleShape& s, ChunkId c) { return model_chunk_index(s, c) == 0; }
bool is_last_chunk(const ScheduleShape& s, ChunkId c) { return model_chunk_index(s, c) == s.stages * s.chunks - 1; }

namespace {
// The op that frees a forward's activations: its W where the schedule splits the backward (what W needs
// stays until then), else its backward.
OpKind releasing_kind(const std::vector<Op>& ops) {
  const bool split = std::any_of(ops.begin(), ops.end(), [](const Op& op) { return op.kind == OpKind::BackwardWeight; });
  return split ? OpKind::BackwardWeight : OpKind::Backward;
}
}  // namespace

int peak_in_flight(const std::vector<Op>& ops) {
  std::set<std::tuple<int, int, int>> live;
  size_t peak = 0;
  const OpKind release = releasing_kind(ops);
  for (const Op& op : ops) {
    if (op.kind == OpKind::Forward) live.insert({op.micro_batch, op.chunk, op.slice});
    if (op.kind == release) live.erase({op.micro_batch, op.chunk, op.slice});
    peak = std::max(peak, live.size());
  }
  return static_cast<int>(peak);
}

double peak_in_flight_bytes(const std::vector<Op>& ops, const std::function<double(int chunk)>& bytes_of_chunk) {
  double live = 0, peak = 0;
  const OpKind release = releasing_kind(ops);
  for (const Op& op : ops) {
    if (op.kind == OpKind::Forward) live += bytes_of_chunk(op.chunk);
    if (op.kind == release) live -= bytes_of_chunk(op.chunk);
    peak = std::max(peak, live);
  }
  return peak;
}

int theoretical_peak_in_flight(const ScheduleShape& s, int stage) {
  if (s.zero_bubble != ZeroBubble::Off) return zero_bubble_activation_limit(s, stage);
  const int total = s.micro_batches * s.chunks * s.slices, warmup = warmup_forwards(s, stage);
  return warmup < total ? warmup + 1 : total;
}

double theoretical_bubble_fraction(const ScheduleShape& s) {
  if (s.zero_bubble != ZeroBubble::Off) return zero_bubble_theoretical_bubble(s);
  return static_cast<double>(s.stages - 1) / (static_cast<double>(s.chunks) * s.micro_batches * s.slices);
}

namespace {

// The stages the uneven split's given counts cover, and the layers left for the others.
int given_stages(const LayerSplit& split) { return (split.first >= 0) + (split.last >= 0); }
int layers_left(const LayerSplit& split) {
  return split.num_layers - std::max(split.first, 0) - std::max(split.last, 0);
}

// The flags that make the embedding and the loss count, as the user gave them.
std::string accounted_flags(const LayerSplit& split) {
  return str_cat(split.embedding ? "--account-for-embedding-in-pipeline-split" : "",
                 split.embedding && split.loss ? " and " : "",
                 split.loss ? "--account-for-loss-in-pipeline-split" : "");
}

// Megatron-Core's rules for the counted split (TransformerConfig's checks): alone, and num_layers + the
// counted ends dividing into p stages, each stage's share into its v chunks.
void validate_accounted_split(const LayerSplit& split, const ScheduleShape& s) {
  const std::string flags = accounted_flags(split);
  TESSERA_CHECK(!split.uneven(), flags, " cannot be combined with --decoder-first-pipeline-num-layers or "
                "--decoder-last-pipeline-num-layers (as in Megatron-Core: give one way of splitting the layers)");
  TESSERA_CHECK(s.zero_bubble != ZeroBubble::V, flags, " cannot be combined with --zero-bubble-v-schedule, which "
                "splits the layers evenly over the V's ", 2 * s.stages, " chunks");
  const std::string counted = str_cat("--num-layers=", split.num_layers, split.embedding ? " + 1 (the embedding)" : "",
                                      split.loss ? " + 1 (the loss)" : "", " = ", split.counted_layers());
  TESSERA_CHECK(split.counted_layers() % s.stages == 0, flags, ": ", counted,
                " must be divisible by --pipeline-model-parallel-size=", s.stages);
  TESSERA_CHECK((split.counted_layers() / s.stages) % s.chunks == 0, flags, ": ", counted, " gives each of the ",
                s.stages, " pipeline stages ", split.counted_layers() / s.stages,
                " layers, which must be divisible by its ", s.chunks, " virtual stages");
}

}  // namespace

int stage_layer_count(const LayerSplit& split, int stages, int stage) {
  if (split.accounts())  // its share of the counted layers, less the embedding's or the loss's place
    return split.counted_layers() / stages - (split.embedding && stage == 0) - (split.loss && stage == stages - 1);
  if (stage == 0 && split.first >= 0) return split.first;
  if (stage == stages - 1 && split.last >= 0) return split.last;
  const int others = stages - (split.uneven() ? given_stages(split) : 0);
  return (split.uneven() ? layers_left(split) : split.num_layers) / std::max(others, 1);
}

void validate_layer_split(const LayerSplit& split, const ScheduleShape& s) {
  if (split.accounts()) {
    validate_accounted_split(split, s);
    return;
  }
  if (s.zero_bubble == ZeroBubble::V) {
    TESSERA_CHECK(!split.uneven(), "--zero-bubble-v-schedule splits the layers evenly over the V's ", 2 * s.stages,
                  " chunks: --decoder-first/last-pipeline-num-layers cannot be given with it");
    TESSERA_CHECK(split.num_layers % (2 * s.stages) == 0, "--zero-bubble-v-schedule: --num-layers=", split.num_layers,
                  " must be a multiple of 2 x --pipeline-model-parallel-size = ", 2 * s.stages,
                  " (an even number of layers per stage, half in each arm of the V)");
    return;
  }
  if (!split.uneven()) {
    const int pieces = s.stages * s.chunks;
    TESSERA_CHECK(split.num_layers % pieces == 0, "--num-layers=", split.num_layers, " does not split evenly over ",
                  s.stages, " pipeline stages",
                  s.chunks > 1 ? str_cat(" x ", s.chunks, " virtual stages per rank") : "", " (it must be a multiple of ",
                  pieces, ")");
    return;
  }
  const std::string given = str_cat(split.first >= 0 ? str_cat("--decoder-first-pipeline-num-layers=", split.first) : "",
                                    split.first >= 0 && split.last >= 0 ? " and " : "",
                                    split.last >= 0 ? str_cat("--decoder-last-pipeline-num-layers=", split.last) : "");
  TESSERA_CHECK(s.stages > 1, given, ": an uneven split needs --pipeline-model-parallel-size > 1");
  const int others = s.stages - given_stages(split), left = layers_left(split);
  if (others == 0)
    TESSERA_CHECK(left == 0, given, ": the first and last stage must hold all --num-layers=", split.num_layers,
                  " on 2 pipeline stages");
  else
    TESSERA_CHECK(left >= others && left % others == 0, given, ": leaves ", left, " of --num-layers=", split.num_layers,
                  " for the ", others, " other pipeline stages, which must split them evenly (at least one each)");
  for (int stage = 0; stage < s.stages; ++stage)
    TESSERA_CHECK(stage_layer_count(split, s.stages, stage) % s.chunks == 0, given, ": pipeline stage ", stage, "'s ",
                  stage_layer_count(split, s.stages, stage), " layers do not split over its ", s.chunks,
                  " virtual stages");
}

LayerRange chunk_layers(const LayerSplit& split, const ScheduleShape& s, ChunkId c) {
  if (s.zero_bubble == ZeroBubble::V) {  // even split (validate_layer_split): model chunk j after chunk j - 1
    const int per_chunk = split.num_layers / (2 * s.stages);
    return {model_chunk_index(s, c) * per_chunk, per_chunk};
  }
  if (split.accounts()) {  // model chunk m holds counted layers [m n, (m + 1) n), n = counted / (p v)
    const int m = model_chunk_index(s, c), pieces = s.stages * s.chunks, n = split.counted_layers() / pieces;
    return {m * n - (split.embedding && m > 0), n - (split.embedding && m == 0) - (split.loss && m == pieces - 1)};
  }
  int before = 0, round = 0;  // layers of the stages before c.stage in one round of chunks; of all stages
  for (int stage = 0; stage < s.stages; ++stage) {
    const int per_chunk = stage_layer_count(split, s.stages, stage) / s.chunks;
    if (stage < c.stage) before += per_chunk;
    round += per_chunk;
  }
  return {c.chunk * round + before, stage_layer_count(split, s.stages, c.stage) / s.chunks};
}

SimulatedRun simulate_schedule(const ScheduleShape& s, const OpCosts& costs, bool forward_only) {
  std::vector<std::vector<Op>> ops(s.stages);
  for (int r = 0; r < s.stages; ++r) ops[r] = build_schedule(s, r, forward_only);
  return simulate_ops(s, ops, costs);
}

SimulatedRun simulate_ops(const ScheduleShape& s, const std::vector<std::vector<Op>>& ops, const OpCosts& costs) {
  const int p = s.stages;
  TESSERA_CHECK(static_cast<int>(ops.size()) == p, "simulate_ops: ", ops.size(), " op lists for ", p, " stages");
  SimulatedRun run;
  run.busy_seconds.assign(p, 0.0);
  run.start.resize(p);
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0.0);
  // When each message was sent: key (kind, micro-batch, receiving stage, receiving chunk, slice).
  std::map<std::tuple<OpKind, int, int, int, int>, double> sent;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < ops[r].size()) {
        const Op& op = ops[r][next[r]];
        double start = clock[r], duration = 0;
        if (op.kind == OpKind::SendForward || op.kind == OpKind::SendBackward) {
          bool fwd = op.kind == OpKind::SendForward;
          ChunkId to = fwd ? next_chunk(s, {r, op.chunk}) : previous_chunk(s, {r, op.chunk});
          sent[{fwd ? OpKind::RecvForward : OpKind::RecvBackward, op.micro_batch, to.stage, to.chunk, op.slice}] = start;
        } else if (op.kind == OpKind::RecvForward || op.kind == OpKind::RecvBackward) {
          auto it = sent.find({op.kind, op.micro_batch, r, op.chunk, op.slice});
          if (it == sent.end()) break;  // blocked until the peer sends
          start = std::max(start, it->second + costs.p2p_seconds);
        } else {
          duration = (op.kind == OpKind::Forward    ? costs.forward_seconds
                      : op.kind == OpKind::Backward ? costs.backward_seconds
                                                    : costs.weight_seconds) / s.slices;
          run.busy_seconds[r] += duration;
        }
        run.start[r].push_back(start);
        clock[r] = start + duration;
        ++next[r];
        progress = true;
      }
    }
  }
  std::string blocked;
  for (int r = 0; r < p; ++r)
    if (next[r] < ops[r].size()) blocked += str_cat(" rank ", r, " at ", to_string(ops[r][next[r]]), ";");
  TESSERA_CHECK(blocked.empty(), "pipeline schedule deadlocks:", blocked);
  run.makespan = *std::max_element(clock.begin(), clock.end());
  return run;
}

bool is_compute(const Op& op) {
  return op.kind == OpKind::Forward || op.kind == OpKind::Backward || op.kind == OpKind::BackwardWeight;
}

std::string to_string(const Op& op) {
  static const char* names[] = {"RF", "F", "SF", "RB", "B", "SB", "W"};
  return str_cat(names[static_cast<int>(op.kind)], op.micro_batch, ".", op.chunk,
                 op.slice > 0 ? str_cat("s", op.slice) : std::string());
}

}  // namespace tessera::pipeline
