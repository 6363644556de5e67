// TeraPipe's schedule (ScheduleShape::slices > 1): 1F1B over the (micro-batch, token slice) units. Every
// slice's forward runs before its backward, a micro-batch's slices forward in order and backward in reverse
// (the key/value caches' gradients flow from later slices to earlier ones), a stage starts a micro-batch's
// backward only after that micro-batch's last slice has passed it, sends match receives slice by slice, the
// lists run against each other without deadlock, and the pipeline fills by slices: the bubble shrinks n times.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "core/check.h"
#include "pipeline/schedules.h"

namespace tessera::pipeline {
namespace {

std::vector<ScheduleShape> sliced_shapes() {
  std::vector<ScheduleShape> out;
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 3, 5, 8})
      for (int n : {2, 3, 4, 7}) out.push_back({p, m, 1, n});
  return out;
}

std::string name(const ScheduleShape& s) {
  return str_cat("p=", s.stages, " m=", s.micro_batches, " n=", s.slices);
}


std::string compute_order(const std::vector<Op>& ops) {
  std::string order;
  for (const Op& op : ops)
    if (is_compute(op)) order += to_string(op) + " ";
  return order;
}

TEST(TokenSliceSchedules, SlicesForwardInOrderAndBackwardInReverseAfterTheLastSlice) {
  for (const ScheduleShape& s : sliced_shapes())
    for (int r = 0; r < s.stages; ++r) {
      SCOPED_TRACE(name(s) + str_cat(" rank ", r));
      const std::vector<Op> ops = build_schedule(s, r);
      std::map<std::pair<int, int>, size_t> forward_at, backward_at;  // (micro-batch, slice) -> position
      for (size_t i = 0; i < ops.size(); ++i) {
        if (!is_compute(ops[i])) continue;
        EXPECT_EQ(ops[i].chunk, 0);
        auto& at = ops[i].kind == OpKind::Forward ? forward_at : backward_at;
        EXPECT_TRUE(at.emplace(std::pair{ops[i].micro_batch, ops[i].slice}, i).second) << to_string(ops[i]);
      }
      ASSERT_EQ(forward_at.size(), static_cast<size_t>(s.micro_batches * s.slices));
      ASSERT_EQ(backward_at.size(), forward_at.size());
      auto fwd = [&](int m, int i) { return forward_at.at(std::pair{m, i}); };
      auto bwd = [&](int m, int i) { return backward_at.at(std::pair{m, i}); };
      const int last = s.slices - 1;
      for (int m = 0; m < s.micro_batches; ++m)
        for (int i = 0; i < s.slices; ++i) {
          // The slice's backward needs the gradients its keys and values get from every later slice.
          EXPECT_LT(fwd(m, last), bwd(m, i)) << "micro-batch " << m << " slice " << i;
          if (i > 0) {
            EXPECT_LT(fwd(m, i - 1), fwd(m, i));
            EXPECT_LT(bwd(m, i), bwd(m, i - 1));
          }
          if (m > 0) {  // micro-batches in order, forward and backward
            EXPECT_LT(fwd(m - 1, last), fwd(m, 0));
            EXPECT_LT(bwd(m - 1, 0), bwd(m, last));
          }
        }
    }
}

TEST(TokenSliceSchedules, CommunicationSurroundsEachSlicesCompute) {
  for (const ScheduleShape& s : sliced_shapes())
    for (int r = 0; r < s.stages; ++r) {
      SCOPED_TRACE(name(s) + str_cat(" rank ", r));
      const std::vector<Op> ops = build_schedule(s, r);
      for (size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        auto expect_at = [&](size_t j, OpKind kind) {
          ASSERT_LT(j, ops.size());
          EXPECT_EQ(ops[j], (Op{kind, op.micro_batch, op.chunk, op.slice})) << "around " << to_string(op);
        };
        if (op.kind == OpKind::Forward) {
          if (r > 0) expect_at(i - 1, OpKind::RecvForward);
          if (r + 1 < s.stages) expect_at(i + 1, OpKind::SendForward);
        }
        if (op.kind == OpKind::Backward) {
          if (r + 1 < s.stages) expect_at(i - 1, OpKind::RecvBackward);
          if (r > 0) expect_at(i + 1, OpKind::SendBackward);
        }
      }
    }
}

TEST(TokenSliceSchedules, EverySendHasOneMatchingReceiveForTheSameSlice) {
  for (const ScheduleShape& s : sliced_shapes()) {
    SCOPED_TRACE(name(s));
    // (forward?, micro-batch, slice, receiving stage) -> +1 per send, -1 per receive.
    std::map<std::tuple<bool, int, int, int>, int> balance;
    for (int r = 0; r < s.stages; ++r)
      for (const Op& op : build_schedule(s, r)) {
        if (op.kind == OpKind::SendForward) ++balance[{true, op.micro_batch, op.slice, r + 1}];
        if (op.kind == OpKind::SendBackward) ++balance[{false, op.micro_batch, op.slice, r - 1}];
        if (op.kind == OpKind::RecvForward) --balance[{true, op.micro_batch, op.slice, r}];
        if (op.kind == OpKind::RecvBackward) --balance[{false, op.micro_batch, op.slice, r}];
      }
    for (auto& [key, count] : balance) EXPECT_EQ(count, 0);
  }
}

TEST(TokenSliceSchedules, SlicesInFlightAreTheWarmupPlusOne) {
  for (const ScheduleShape& s : sliced_shapes())
    for (int r = 0; r < s.stages; ++r) {
      SCOPED_TRACE(name(s) + str_cat(" rank ", r));
      const int peak = peak_in_flight(build_schedule(s, r));
      EXPECT_EQ(peak, theoretical_peak_in_flight(s, r));
      EXPECT_EQ(peak, std::min(s.stages - r + s.slices - 1, s.micro_batches * s.slices));
    }
}

TEST(TokenSliceSchedules, TwoStagesTwoMicroBatchesTwoSlices) {
  // The last stage runs a micro-batch's slices forward, then its backward from the last slice while the
  // next micro-batch's slices arrive; the first stage runs one slice further ahead.
  ScheduleShape s{2, 2, 1, 2};
  EXPECT_EQ(compute_order(build_schedule(s, 0)), "F0.0 F0.0s1 F1.0 B0.0s1 F1.0s1 B0.0 B1.0s1 B1.0 ");
  EXPECT_EQ(compute_order(build_schedule(s, 1)), "F0.0 F0.0s1 B0.0s1 F1.0 B0.0 F1.0s1 B1.0s1 B1.0 ");
  const std::vector<Op> last = build_schedule(s, 1);
  ASSERT_GE(last.size(), 3u);
  EXPECT_EQ(last[0], (Op{OpKind::RecvForward, 0, 0, 0}));
  EXPECT_EQ(last[2], (Op{OpKind::RecvForward, 0, 0, 1}));
  // One slice is 1F1B itself.
  EXPECT_EQ(build_schedule({4, 6, 1, 1}, 1), build_schedule({4, 6, 1}, 1));
}

TEST(TokenSliceSchedules, SimulatedRunsFinishAndTheBubbleShrinksWithTheSlices) {
  for (const ScheduleShape& s : sliced_shapes()) {
    SCOPED_TRACE(name(s));
    const OpCosts costs{1.0, 2.0, 0.0};  // per micro-batch; a slice costs 1/n of it
    SimulatedRun run;
    ASSERT_NO_THROW(run = simulate_schedule(s, costs));
    ASSERT_NO_THROW(simulate_schedule(s, costs, /*forward_only=*/true));
    const double ideal = 3.0 * s.micro_batches;
    for (double busy : run.busy_seconds) EXPECT_NEAR(busy, ideal, 1e-9);
    // TeraPipe's latency with equal slices: the pipeline fills and drains by one slice per stage, and
    // the last stage waits for a micro-batch's last slice before its backward.
    const double bubble = (run.makespan - ideal) / ideal;
    ScheduleShape unsliced = s;
    unsliced.slices = 1;
    const double unsliced_bubble = (simulate_schedule(unsliced, costs).makespan - ideal) / ideal;
    if (s.stages == 1) {
      EXPECT_NEAR(bubble, 0.0, 1e-9);
    } else {
      EXPECT_LT(bubble, unsliced_bubble);
      EXPECT_NEAR(bubble, theoretical_bubble_fraction(s), 1e-9);
    }
  }
}

TEST(TokenSliceSchedules, InterleavingWithSlicesIsRefusedNamingTheFlag) {
  try {
    build_schedule({2, 4, 2, 4}, 0);
    FAIL() << "interleaved schedule with token slices accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--pipeline-token-slices"), std::string::npos) << e.what();
  }
  EXPECT_THROW(build_schedule({2, 4, 1, 0}, 0), Error);
  EXPECT_EQ(to_string(Op{OpKind::Forward, 3, 0, 2}), "F3.0s2");
  EXPECT_EQ(to_string(Op{OpKind::RecvBackward, 3, 0, 0}), "RB3.0");
}

}  // namespace
}  // namespace tessera::pipeline
