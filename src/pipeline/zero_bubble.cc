#include "pipeline/zero_bubble.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>

#include "core/check.h"

namespace tessera::pipeline {
namespace {

constexpr double kUnknown = -1;  // a finish time not simulated yet

// The greedy list scheduler of zero_bubble.h, one simulated run over every rank.
class GreedyScheduler {
 public:
  GreedyScheduler(const ScheduleShape& s, const ZeroBubbleCosts& costs, bool forward_only)
      : s_(s), costs_(costs), forward_only_(forward_only), chunks_(s.stages * s.chunks),
        forward_end_(chunks_, std::vector<double>(s.micro_batches, kUnknown)),
        backward_end_(chunks_, std::vector<double>(s.micro_batches, kUnknown)), ranks_(s.stages) {
    for (Rank& r : ranks_) r.next_forward.assign(s.chunks, 0), r.next_backward.assign(s.chunks, 0), r.held.assign(s.chunks, 0);
  }

  std::vector<std::vector<Op>> run() {
    const int per_rank = s_.micro_batches * s_.chunks * (forward_only_ ? 1 : 3);
    // Each rank's next choice, kept until what it depends on changes: a commit changes its own rank and
    // the rank that receives its output (F: the next model chunk's, B: the previous one's). So a step
    // decides again for at most three ranks, not all p (the planner builds lists for p = 64 and more).
    std::vector<Choice> next(s_.stages);
    std::vector<double> when(s_.stages);  // next[r].time, or infinity while rank r can only wait
    auto refresh = [&](int r) {
      const std::optional<Choice> c = decide(r);
      when[r] = c ? c->time : std::numeric_limits<double>::infinity();
      if (c) next[r] = *c;
    };
    for (int r = 0; r < s_.stages; ++r) refresh(r);
    for (int left = per_rank * s_.stages; left > 0; --left) {
      const int best = static_cast<int>(std::min_element(when.begin(), when.end()) - when.begin());  // first of ties
      TESSERA_CHECK(when[best] != std::numeric_limits<double>::infinity(),
                    "zero-bubble schedule: no rank can run an operation (", left, " left)");
      const Choice choice = next[best];
      const int j = index(best, choice.chunk);
      commit(best, choice);
      refresh(best);
      const int receiver = choice.pass == Pass::F ? j + 1 : choice.pass == Pass::B ? j - 1 : -1;
      if (receiver >= 0 && receiver < chunks_) refresh(chunk_at(s_, receiver).stage);
    }
    std::vector<std::vector<Op>> ops;
    for (Rank& r : ranks_) ops.push_back(std::move(r.ops));
    return ops;
  }

 private:
  enum class Pass { F, B, W };
  struct Choice {
    double time = 0;
    Pass pass = Pass::F;
    int chunk = 0;
  };
  struct Rank {
    double free_at = 0;
    std::vector<int> next_forward, next_backward;  // per chunk of the rank: its next micro-batch
    std::deque<std::pair<int, int>> deferred;     // (micro-batch, chunk) whose B ran and W has not
    std::vector<int> held;                        // per chunk: activations from F to W
    std::vector<Op> ops;
  };

  int index(int rank, int chunk) const { return model_chunk_index(s_, {rank, chunk}); }
  // When a message from model chunk `from` reaches rank `rank` (kUnknown: not sent yet).
  double arrival(double end, int from, int rank) const {
    if (end == kUnknown) return kUnknown;
    return chunk_at(s_, from).stage == rank ? end : end + costs_.p2p;
  }
  double forward_ready(int rank, int chunk) const {
    const int m = ranks_[rank].next_forward[chunk], j = index(rank, chunk);
    if (m >= s_.micro_batches) return kUnknown;
    return j == 0 ? 0.0 : arrival(forward_end_[j - 1][m], j - 1, rank);
  }
  double backward_ready(int rank, int chunk) const {
    const int m = ranks_[rank].next_backward[chunk], j = index(rank, chunk);
    if (forward_only_ || m >= s_.micro_batches || forward_end_[j][m] == kUnknown) return kUnknown;
    return j == chunks_ - 1 ? forward_end_[j][m] : arrival(backward_end_[j + 1][m], j + 1, rank);
  }
  bool forward_allowed(int rank, int chunk) const {
    if (forward_only_) return true;
    const Rank& r = ranks_[rank];
    const int bound = s_.max_pending_weight_passes;
    return r.held[chunk] < zero_bubble_activation_limit(s_, rank) / s_.chunks &&
           (bound == 0 || static_cast<int>(r.deferred.size()) < bound);
  }

  // What rank `rank` runs next and when, as zero_bubble.h orders it; nothing while it can only wait for a
  // message no one has sent yet.
  std::optional<Choice> decide(int rank) const {
    const Rank& r = ranks_[rank];
    std::optional<Choice> backward, forward;
    for (int c = 0; c < s_.chunks; ++c) {
      const double b = backward_ready(rank, c);
      if (b != kUnknown && (!backward || b < backward->time)) backward = Choice{b, Pass::B, c};
      const double f = forward_allowed(rank, c) ? forward_ready(rank, c) : kUnknown;
      // Between two ready forwards, the later model chunk: its micro-batch reaches the loss sooner.
      if (f != kUnknown && (!forward || f < forward->time || (f == forward->time && index(rank, c) > index(rank, forward->chunk))))
        forward = Choice{f, Pass::F, c};
    }
    if (backward && backward->time <= r.free_at) return Choice{r.free_at, Pass::B, backward->chunk};
    if (forward && forward->time <= r.free_at) return Choice{r.free_at, Pass::F, forward->chunk};
    if (!r.deferred.empty()) return Choice{r.free_at, Pass::W, r.deferred.front().second};
    if (backward && (!forward || backward->time <= forward->time)) return backward;
    return forward;
  }

  void commit(int rank, const Choice& c) {
    Rank& r = ranks_[rank];
    const ChunkId id{rank, c.chunk};
    const int j = index(rank, c.chunk);
    double seconds = 0;
    if (c.pass == Pass::F) {
      const int m = r.next_forward[c.chunk]++;
      if (!is_first_chunk(s_, id)) r.ops.push_back({OpKind::RecvForward, m, c.chunk});
      r.ops.push_back({OpKind::Forward, m, c.chunk});
      if (!is_last_chunk(s_, id)) r.ops.push_back({OpKind::SendForward, m, c.chunk});
      seconds = costs_.forward;
      forward_end_[j][m] = c.time + seconds;
      if (!forward_only_) ++r.held[c.chunk];
    } else if (c.pass == Pass::B) {
      const int m = r.next_backward[c.chunk]++;
      if (!is_last_chunk(s_, id)) r.ops.push_back({OpKind::RecvBackward, m, c.chunk});
      r.ops.push_back({OpKind::Backward, m, c.chunk});
      if (!is_first_chunk(s_, id)) r.ops.push_back({OpKind::SendBackward, m, c.chunk});
      seconds = costs_.backward_input;
      backward_end_[j][m] = c.time + seconds;
      r.deferred.emplace_back(m, c.chunk);
    } else {
      const auto [m, chunk] = r.deferred.front();
      r.deferred.pop_front();
      --r.held[chunk];
      r.ops.push_back({OpKind::BackwardWeight, m, chunk});
      seconds = costs_.backward_weight;
    }
    r.free_at = c.time + seconds;
  }

  const ScheduleShape& s_;
  ZeroBubbleCosts costs_;
  bool forward_only_;
  int chunks_;  // model chunks, p v
  std::vector<std::vector<double>> forward_end_, backward_end_;  // [model chunk][micro-batch]
  std::vector<Rank> ranks_;
};

}  // namespace

std::vector<std::vector<Op>> build_zero_bubble_schedules(const ScheduleShape& s, const ZeroBubbleCosts& costs,
                                                         bool forward_only) {
  validate_schedule(s);
  TESSERA_CHECK(s.zero_bubble != ZeroBubble::Off, "build_zero_bubble_schedules: the shape is not a zero-bubble one");
  TESSERA_CHECK(costs.forward > 0 && costs.backward_input > 0 && costs.backward_weight > 0 && costs.p2p >= 0,
                "zero-bubble schedule: F, B and W must cost more than 0 seconds and a transfer not less (F ",
                costs.forward, ", B ", costs.backward_input, ", W ", costs.backward_weight, ", p2p ", costs.p2p, ")");
  return GreedyScheduler(s, costs, forward_only).run();
}

int zero_bubble_activation_limit(const ScheduleShape& s, int stage) {
  return s.chunks * std::min(s.stages, s.micro_batches);
}

double zero_bubble_theoretical_bubble(const ScheduleShape& s) {
  const std::vector<std::vector<Op>> ops = build_zero_bubble_schedules(s, ZeroBubbleCosts());
  const SimulatedRun run = simulate_ops(s, ops, OpCosts{1, 1, 1, 0});
  const double compute = 3.0 * s.micro_batches * s.chunks;
  return (run.makespan - compute) / compute;
}

}  // namespace tessera::pipeline
