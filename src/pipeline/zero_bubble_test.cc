// Zero-bubble schedules (pipeline/zero_bubble.h): every pass once and in dependency order, the memory
// bound, no deadlock under other costs than those that built the lists, the V placement, and bubbles
// below 1F1B's.
#include "pipeline/zero_bubble.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "core/check.h"
#include "core/testing.h"

namespace tessera::pipeline {
namespace {

using ::tessera::testing::error_of;

ScheduleShape zero_bubble(int p, int m, ZeroBubble kind, int max_pending = 0) {
  ScheduleShape s{p, m, kind == ZeroBubble::V ? 2 : 1};
  s.zero_bubble = kind;
  s.max_pending_weight_passes = max_pending;
  return s;
}

std::vector<ScheduleShape> shapes() {
  std::vector<ScheduleShape> out;
  for (ZeroBubble kind : {ZeroBubble::H1, ZeroBubble::V})
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 3, 5, 8, 13, 24})
        for (int pending : {0, 1, 3})
          if (kind == ZeroBubble::H1 || p > 1) out.push_back(zero_bubble(p, m, kind, pending));
  return out;
}

std::string name(const ScheduleShape& s) {
  return str_cat(s.zero_bubble == ZeroBubble::V ? "ZB-V" : "ZB-H1", " p=", s.stages, " m=", s.micro_batches,
                 " max pending W=", s.max_pending_weight_passes);
}

TEST(ZeroBubble, EveryPassRunsOnceAfterWhatItNeeds) {
  for (const ScheduleShape& s : shapes()) {
    const std::vector<std::vector<Op>> ops = build_zero_bubble_schedules(s, ZeroBubbleCosts());
    for (int r = 0; r < s.stages; ++r) {
      SCOPED_TRACE(name(s) + str_cat(" rank ", r));
      std::map<std::tuple<OpKind, int, int>, size_t> at;  // (pass, micro-batch, chunk) -> position
      std::map<std::pair<OpKind, int>, int> next;          // (pass, chunk) -> the micro-batch due
      for (size_t i = 0; i < ops[r].size(); ++i) {
        const Op& op = ops[r][i];
        const ChunkId c{r, op.chunk};
        // Receives and sends surround their compute op, as build_schedule's.
        if (op.kind == OpKind::RecvForward) {
          EXPECT_EQ(ops[r].at(i + 1), (Op{OpKind::Forward, op.micro_batch, op.chunk}));
        }
        if (op.kind == OpKind::SendBackward) {
          EXPECT_EQ(ops[r].at(i - 1), (Op{OpKind::Backward, op.micro_batch, op.chunk}));
        }
        if (op.kind == OpKind::Forward) {
          EXPECT_EQ(is_first_chunk(s, c), i == 0 || ops[r][i - 1].kind != OpKind::RecvForward) << to_string(op);
        }
        if (!is_compute(op)) continue;
        EXPECT_TRUE(at.emplace(std::tuple{op.kind, op.micro_batch, op.chunk}, i).second) << to_string(op);
        if (op.kind != OpKind::BackwardWeight) {  // F and B take each chunk's micro-batches in order
          int& due = next[std::pair(op.kind, op.chunk)];
          EXPECT_EQ(op.micro_batch, due++) << to_string(op);
        }
      }
      ASSERT_EQ(at.size(), static_cast<size_t>(3 * s.micro_batches * s.chunks));
      for (int m = 0; m < s.micro_batches; ++m)
        for (int c = 0; c < s.chunks; ++c) {
          const size_t f = at[std::tuple(OpKind::Forward, m, c)], b = at[std::tuple(OpKind::Backward, m, c)],
                       w = at[std::tuple(OpKind::BackwardWeight, m, c)];
          EXPECT_LT(f, b);
          EXPECT_LT(b, w);
        }
    }
  }
}

TEST(ZeroBubble, HoldsNoMoreThanOneF1BPeakAndDefersAtMostTheBound) {
  for (const ScheduleShape& s : shapes()) {
    const std::vector<std::vector<Op>> ops = build_zero_bubble_schedules(s, ZeroBubbleCosts());
    const ScheduleShape one_f_one_b{s.stages, s.micro_batches, 1};
    for (int r = 0; r < s.stages; ++r) {
      SCOPED_TRACE(name(s) + str_cat(" rank ", r));
      // In micro-batches' worth: ZB-V's chunks hold half a micro-batch's layers each.
      EXPECT_LE(peak_in_flight_bytes(ops[r], [&](int) { return 1.0 / s.chunks; }),
                theoretical_peak_in_flight(one_f_one_b, 0));
      EXPECT_LE(peak_in_flight(ops[r]), theoretical_peak_in_flight(s, r));
      int deferred = 0, most = 0;
      for (const Op& op : ops[r]) {
        deferred += (op.kind == OpKind::Backward) - (op.kind == OpKind::BackwardWeight);
        most = std::max(most, deferred);
      }
      // A bound of k lets k passes wait before the next F; B passes with no F left to run may add to them.
      if (s.max_pending_weight_passes > 0 && s.micro_batches > s.max_pending_weight_passes) {
        EXPECT_LE(most, s.max_pending_weight_passes + s.stages * s.chunks);
      }
    }
  }
}

TEST(ZeroBubble, ListsBuiltForSomeCostsNeverDeadlockUnderOthers) {
  const ZeroBubbleCosts built[] = {{1, 1, 1, 0}, {1, 2, 0.5, 0.3}, {3, 1, 2, 1}};
  const OpCosts run[] = {{1, 1, 1, 0}, {2, 1, 3, 0.5}, {0.5, 3, 0.2, 2}};
  for (const ScheduleShape& s : shapes())
    for (const ZeroBubbleCosts& b : built) {
      const std::vector<std::vector<Op>> ops = build_zero_bubble_schedules(s, b);
      for (const OpCosts& c : run) {
        SCOPED_TRACE(name(s));
        const SimulatedRun sim = simulate_ops(s, ops, c);  // throws naming each rank's op on a deadlock
        const double compute = s.micro_batches * s.chunks * (c.forward_seconds + c.backward_seconds + c.weight_seconds);
        EXPECT_GE(sim.makespan, compute - 1e-9);
      }
    }
}

// 1F1B with B and W fused, at the same per-layer costs: F 1, B + W 2 per micro-batch and stage.
double one_f_one_b_bubble(int p, int m) {
  const SimulatedRun run = simulate_schedule(ScheduleShape{p, m, 1}, OpCosts{1, 2, 0, 0});
  return (run.makespan - 3.0 * m) / (3.0 * m);
}

TEST(ZeroBubble, BubbleBelowOneF1BAndZeroBubbleVBelowH1) {
  for (int p : {2, 4, 8})
    for (int m : {2 * p, 3 * p, 24}) {
      SCOPED_TRACE(str_cat("p=", p, " m=", m));
      const double h1 = zero_bubble_theoretical_bubble(zero_bubble(p, m, ZeroBubble::H1));
      const double v = zero_bubble_theoretical_bubble(zero_bubble(p, m, ZeroBubble::V));
      const double base = one_f_one_b_bubble(p, m);
      EXPECT_NEAR(base, (p - 1) / static_cast<double>(m), 1e-12);  // 1F1B's (p - 1) / m
      // ZB-H1 within two units of the paper's hand-made (p - 1) (F + B - W) = p - 1 units.
      EXPECT_LE(h1 * 3 * m, p + 1 + 1e-9);
      EXPECT_LT(h1, 0.6 * base);  // the paper: a third of it
      EXPECT_LE(v, h1 + 1e-12);
      EXPECT_GE(v, 0.0);
    }
  // The training schedule's numbers are the same lists: build_schedule is zero_bubble.h's at unit costs.
  const ScheduleShape s = zero_bubble(4, 8, ZeroBubble::V);
  const std::vector<std::vector<Op>> lists = build_zero_bubble_schedules(s, ZeroBubbleCosts());
  for (int r = 0; r < 4; ++r) EXPECT_EQ(build_schedule(s, r), lists[r]);
  EXPECT_DOUBLE_EQ(theoretical_bubble_fraction(s), zero_bubble_theoretical_bubble(s));
}

TEST(ZeroBubble, ForwardOnlyRunsEachChunksForwardsInOrder) {
  for (const ScheduleShape& s : shapes())
    for (int r = 0; r < s.stages; ++r) {
      std::vector<int> next(s.chunks, 0);
      for (const Op& op : build_schedule(s, r, /*forward_only=*/true)) {
        ASSERT_NE(op.kind, OpKind::Backward);
        ASSERT_NE(op.kind, OpKind::BackwardWeight);
        if (op.kind == OpKind::Forward) {
          EXPECT_EQ(op.micro_batch, next[op.chunk]++);
        }
      }
      for (int n : next) EXPECT_EQ(n, s.micro_batches);
    }
}

TEST(ZeroBubble, TheVPlacesModelChunksDownAndBackUp) {
  const ScheduleShape s = zero_bubble(4, 8, ZeroBubble::V);
  // Rank r holds model chunks r and 7 - r: rank 0 the first and the last, rank 3 the two middle ones.
  EXPECT_EQ(model_chunk_index(s, {0, 0}), 0);
  EXPECT_EQ(model_chunk_index(s, {0, 1}), 7);
  EXPECT_EQ(model_chunk_index(s, {3, 0}), 3);
  EXPECT_EQ(model_chunk_index(s, {3, 1}), 4);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(model_chunk_index(s, chunk_at(s, j)), j);
  EXPECT_EQ(next_chunk(s, {3, 0}), (ChunkId{3, 1}));  // the turn stays on rank 3
  EXPECT_EQ(next_chunk(s, {2, 1}), (ChunkId{1, 1}));
  EXPECT_EQ(previous_chunk(s, {3, 1}), (ChunkId{3, 0}));
  EXPECT_TRUE(is_first_chunk(s, {0, 0}));
  EXPECT_TRUE(is_last_chunk(s, {0, 1}));
  EXPECT_FALSE(is_last_chunk(s, {3, 1}));
  // 16 layers: 2 per chunk, model chunk j holding layers 2j and 2j + 1.
  EXPECT_EQ(chunk_layers(16, s, {0, 1}).first, 14);
  EXPECT_EQ(chunk_layers(16, s, {3, 1}).first, 8);
  EXPECT_EQ(chunk_layers(16, s, {2, 0}).first, 4);
  EXPECT_EQ(chunk_layers(16, s, {2, 0}).count, 2);
  // The interleaved placement is unchanged.
  const ScheduleShape interleaved{4, 8, 2};
  EXPECT_EQ(model_chunk_index(interleaved, {0, 1}), 4);
  EXPECT_EQ(next_chunk(interleaved, {3, 0}), (ChunkId{0, 1}));
}

TEST(ZeroBubble, RefusesShapesItCannotScheduleByFlag) {
  ScheduleShape s = zero_bubble(4, 8, ZeroBubble::H1);
  s.chunks = 2;
  EXPECT_NE(error_of([&] { validate_schedule(s); }).find("--enable-zero-bubble is 1F1B's placement"), std::string::npos);
  EXPECT_NE(error_of([&] { validate_schedule(zero_bubble(1, 8, ZeroBubble::V)); })
                .find("--zero-bubble-v-schedule needs --pipeline-model-parallel-size > 1"),
            std::string::npos);
  s = zero_bubble(2, 8, ZeroBubble::H1);
  s.slices = 4;
  EXPECT_NE(error_of([&] { validate_schedule(s); }).find("cannot be combined with --pipeline-token-slices"),
            std::string::npos);
  EXPECT_NE(error_of([&] { validate_schedule(zero_bubble(2, 8, ZeroBubble::H1, -1)); })
                .find("--zero-bubble-max-pending-backward=-1 must not be negative"),
            std::string::npos);
  const ScheduleShape v = zero_bubble(4, 8, ZeroBubble::V);
  EXPECT_NE(error_of([&] { validate_layer_split(12, v); })
                .find("--zero-bubble-v-schedule: --num-layers=12 must be a multiple of 2 x "
                      "--pipeline-model-parallel-size = 8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { validate_layer_split(LayerSplit{16, 2, -1}, v); })
                .find("--decoder-first/last-pipeline-num-layers cannot be given"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { validate_layer_split(16, v); }), "");
}

}  // namespace
}  // namespace tessera::pipeline
