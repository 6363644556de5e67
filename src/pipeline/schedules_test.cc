// The schedules' op lists: every forward before its backward, sends matched by receives on the right
// neighbour, no deadlock when run against each other, and the in-flight and bubble numbers of theory.
#include "pipeline/schedules.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <utility>
#include <vector>
#include <tuple>

#include "core/check.h"

namespace tessera::pipeline {
namespace {

std::vector<ScheduleShape> shapes() {
  std::vector<ScheduleShape> out;
  for (int p : {1, 2, 3, 4, 8})
    for (int v : {1, 2, 3})
      for (int m : {1, 2, 3, 4, 5, 8, 12, 16, 32}) {
        ScheduleShape s{p, m, v};
        if (v > 1 && (p == 1 || m % p != 0)) continue;
        out.push_back(s);
      }
  return out;
}

std::string name(const ScheduleShape& s) { return str_cat("p=", s.stages, " m=", s.micro_batches, " v=", s.chunks); }

TEST(Schedules, EveryForwardPrecedesItsBackwardAndEachRunsOnce) {
  for (const ScheduleShape& s : shapes())
    for (int r = 0; r < s.stages; ++r) {
      SCOPED_TRACE(name(s) + str_cat(" rank ", r));
      std::map<std::pair<int, int>, int> forward_at, backward_at;
      std::vector<Op> ops = build_schedule(s, r);
      for (size_t i = 0; i < ops.size(); ++i) {
        auto key = std::pair{ops[i].micro_batch, ops[i].chunk};
        if (ops[i].kind == OpKind::Forward) {
          EXPECT_TRUE(forward_at.emplace(key, i).second);
        }
        if (ops[i].kind == OpKind::Backward) {
          EXPECT_TRUE(backward_at.emplace(key, i).second);
        }
      }
      ASSERT_EQ(forward_at.size(), static_cast<size_t>(s.micro_batches * s.chunks));
      ASSERT_EQ(backward_at.size(), forward_at.size());
      for (auto& [key, at] : forward_at) EXPECT_LT(at, backward_at[key]);
      // Each chunk sees its micro-batches in order, forward and backward.
      std::map<std::pair<OpKind, int>, int> last;
      for (const Op& op : ops) {
        if (op.kind != OpKind::Forward && op.kind != OpKind::Backward) continue;
        auto [it, fresh] = last.emplace(std::pair{op.kind, op.chunk}, op.micro_batch);
        if (!fresh) {
          EXPECT_EQ(op.micro_batch, it->second + 1) << to_string(op);
        }
        it->second = op.micro_batch;
      }
    }
}

TEST(Schedules, CommunicationSurroundsComputeExceptAtTheModelsEnds) {
  for (const ScheduleShape& s : shapes())
    for (int r = 0; r < s.stages; ++r) {
      SCOPED_TRACE(name(s) + str_cat(" rank ", r));
      std::vector<Op> ops = build_schedule(s, r);
      for (size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        ChunkId c{r, op.chunk};
        auto expect_at = [&](size_t j, OpKind kind) {
          ASSERT_LT(j, ops.size());
          EXPECT_EQ(ops[j], (Op{kind, op.micro_batch, op.chunk})) << "around " << to_string(op);
        };
        if (op.kind == OpKind::Forward) {
          if (!is_first_chunk(s, c)) expect_at(i - 1, OpKind::RecvForward);
          if (!is_last_chunk(s, c)) expect_at(i + 1, OpKind::SendForward);
        }
        if (op.kind == OpKind::Backward) {
          if (!is_last_chunk(s, c)) expect_at(i - 1, OpKind::RecvBackward);
          if (!is_first_chunk(s, c)) expect_at(i + 1, OpKind::SendBackward);
        }
      }
    }
}

TEST(Schedules, EverySendHasOneMatchingReceiveOnTheNeighbour) {
  for (const ScheduleShape& s : shapes()) {
    SCOPED_TRACE(name(s));
    // (direction, micro-batch, receiving stage, receiving chunk) -> count: +1 per send, -1 per receive.
    std::map<std::tuple<bool, int, int, int>, int> balance;
    for (int r = 0; r < s.stages; ++r)
      for (const Op& op : build_schedule(s, r)) {
        ChunkId c{r, op.chunk};
        if (op.kind == OpKind::SendForward) {
          ChunkId to = next_chunk(s, c);
          EXPECT_EQ(previous_chunk(s, to), c);
          ++balance[{true, op.micro_batch, to.stage, to.chunk}];
        }
        if (op.kind == OpKind::SendBackward) {
          ChunkId to = previous_chunk(s, c);
          EXPECT_EQ(next_chunk(s, to), c);
          ++balance[{false, op.micro_batch, to.stage, to.chunk}];
        }
        if (op.kind == OpKind::RecvForward) --balance[{true, op.micro_batch, r, op.chunk}];
        if (op.kind == OpKind::RecvBackward) --balance[{false, op.micro_batch, r, op.chunk}];
      }
    for (auto& [key, count] : balance) EXPECT_EQ(count, 0);
  }
}

TEST(Schedules, PeakInFlightIsTheTheoreticalOne) {
  for (const ScheduleShape& s : shapes())
    for (int r = 0; r < s.stages; ++r) {
      SCOPED_TRACE(name(s) + str_cat(" rank ", r));
      int peak = peak_in_flight(build_schedule(s, r));
      EXPECT_EQ(peak, theoretical_peak_in_flight(s, r));
      if (s.chunks == 1) {
        EXPECT_EQ(peak, std::min(s.stages - r, s.micro_batches));  // 1F1B's bound
      } else if (s.micro_batches > s.stages) {  // Megatron's interleaved warm-up, plus the steady forward
        EXPECT_EQ(peak, std::min((s.stages - r - 1) * 2 + (s.chunks - 1) * s.stages + 1,
                                 s.micro_batches * s.chunks));
      }
    }
}

TEST(Schedules, NoPipeliningAlternatesForwardAndBackward) {
  std::vector<Op> ops = build_schedule({1, 3, 1}, 0);
  std::vector<Op> expected{{OpKind::Forward, 0, 0}, {OpKind::Backward, 0, 0}, {OpKind::Forward, 1, 0},
                           {OpKind::Backward, 1, 0}, {OpKind::Forward, 2, 0}, {OpKind::Backward, 2, 0}};
  EXPECT_EQ(ops, expected);
}

TEST(Schedules, OneFOneBOnFourStagesHasMegatronsWarmup) {
  // Rank 1 of 4 with 6 micro-batches: two warm-up forwards, then 1F1B, then two cool-down backwards.
  std::string order;
  for (const Op& op : build_schedule({4, 6, 1}, 1))
    if (op.kind == OpKind::Forward || op.kind == OpKind::Backward) order += to_string(op) + " ";
  EXPECT_EQ(order, "F0.0 F1.0 F2.0 B0.0 F3.0 B1.0 F4.0 B2.0 F5.0 B3.0 B4.0 B5.0 ");
}

TEST(Schedules, InterleavedOrderFollowsMegatronsChunkNumbering) {
  // p = 2, v = 2, m = 4, rank 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 forwards over the groups of p
  // micro-batches: chunk 0 for micro-batches 0 and 1, then chunk 1 for them, ...
  std::string order;
  for (const Op& op : build_schedule({2, 4, 2}, 0))
    if (op.kind == OpKind::Forward || op.kind == OpKind::Backward) order += to_string(op) + " ";
  EXPECT_EQ(order,
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0 ");
}

TEST(Schedules, SimulatedRunsFinishWithTheTheoreticalBubble) {
  for (const ScheduleShape& s : shapes()) {
    SCOPED_TRACE(name(s));
    // Each chunk holds 1/v of a stage's layers: forward 1/v, backward 2/v time units.
    OpCosts costs{1.0 / s.chunks, 2.0 / s.chunks, 0.0};
    SimulatedRun run = simulate_schedule(s, costs);
    const double ideal = 3.0 * s.micro_batches;  // one stage's compute for the whole batch
    for (double busy : run.busy_seconds) EXPECT_NEAR(busy, ideal, 1e-9);
    const double bubble = (run.makespan - ideal) / ideal;
    if (s.chunks == 1 || s.micro_batches > s.stages) {
      EXPECT_NEAR(bubble, theoretical_bubble_fraction(s), 1e-9);
    } else {  // m == p with interleaving runs all forwards first: never worse than 1F1B
      EXPECT_LE(bubble, static_cast<double>(s.stages - 1) / s.micro_batches + 1e-9);
    }
    EXPECT_NO_THROW(simulate_schedule(s, costs, /*forward_only=*/true));
  }
}

TEST(Schedules, SimulatorDetectsADeadlock) {
  // Rank 0 sends its activation only after receiving the gradient that depends on it.
  ScheduleShape s{2, 1, 1};
  std::vector<std::vector<Op>> ops{
      {{OpKind::Forward, 0, 0}, {OpKind::RecvBackward, 0, 0}, {OpKind::SendForward, 0, 0}, {OpKind::Backward, 0, 0}},
      {{OpKind::RecvForward, 0, 0}, {OpKind::Forward, 0, 0}, {OpKind::Backward, 0, 0}, {OpKind::SendBackward, 0, 0}}};
  try {
    simulate_ops(s, ops, {});
    FAIL() << "no deadlock reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 at RB0.0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 at RF0.0"), std::string::npos) << e.what();
  }
  ops[0] = build_schedule(s, 0);
  EXPECT_NO_THROW(simulate_ops(s, ops, {}));
}

TEST(Schedules, ErrorsNameTheRule) {
  EXPECT_THROW(build_schedule({2, 3, 2}, 0), Error);  // m not a multiple of p when interleaved
  EXPECT_THROW(build_schedule({1, 4, 2}, 0), Error);  // interleaving without a pipeline
  EXPECT_THROW(build_schedule({2, 0, 1}, 0), Error);
  EXPECT_THROW(build_schedule({2, 2, 1}, 2), Error);
  try {
    validate_layer_split(6, {4, 4, 1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--num-layers=6"), std::string::npos) << e.what();
  }
}

TEST(Schedules, ChunkLayersFollowMegatronsAssignment) {
  // 8 layers, p = 2, v = 2: rank 0 holds layers 0-1 and 4-5, rank 1 holds 2-3 and 6-7.
  ScheduleShape s{2, 4, 2};
  EXPECT_EQ(chunk_layers(8, s, {0, 0}).first, 0);
  EXPECT_EQ(chunk_layers(8, s, {1, 0}).first, 2);
  EXPECT_EQ(chunk_layers(8, s, {0, 1}).first, 4);
  EXPECT_EQ(chunk_layers(8, s, {1, 1}).first, 6);
  EXPECT_EQ(chunk_layers(8, s, {1, 1}).count, 2);
}

// Megatron-Core's uneven split. 10 layers, p = 3, 2 on the first and 2 on the last stage: 2, 6, 2.
// Interleaved (v = 2), a round of chunks holds 1 + 3 + 1 layers: stage 0 holds layers 0 and 5, stage 1
// holds 1-3 and 6-8, stage 2 holds 4 and 9.
TEST(Schedules, UnevenChunkLayersFollowMegatronCoresOffsets) {
  const LayerSplit split{10, 2, 2};
  ScheduleShape flat{3, 4, 1}, interleaved{3, 6, 2};
  EXPECT_EQ(stage_layer_count(split, 3, 0), 2);
  EXPECT_EQ(stage_layer_count(split, 3, 1), 6);
  EXPECT_EQ(stage_layer_count(split, 3, 2), 2);
  auto range = [](LayerRange r) { return std::pair{r.first, r.count}; };
  EXPECT_EQ(range(chunk_layers(split, flat, {0, 0})), std::pair(0, 2));
  EXPECT_EQ(range(chunk_layers(split, flat, {1, 0})), std::pair(2, 6));
  EXPECT_EQ(range(chunk_layers(split, flat, {2, 0})), std::pair(8, 2));
  EXPECT_EQ(range(chunk_layers(split, interleaved, {0, 0})), std::pair(0, 1));
  EXPECT_EQ(range(chunk_layers(split, interleaved, {1, 0})), std::pair(1, 3));
  EXPECT_EQ(range(chunk_layers(split, interleaved, {2, 0})), std::pair(4, 1));
  EXPECT_EQ(range(chunk_layers(split, interleaved, {0, 1})), std::pair(5, 1));
  EXPECT_EQ(range(chunk_layers(split, interleaved, {1, 1})), std::pair(6, 3));
  EXPECT_EQ(range(chunk_layers(split, interleaved, {2, 1})), std::pair(9, 1));
  // Only the first given: the rest even over the other stages; only the last likewise.
  EXPECT_EQ(range(chunk_layers(LayerSplit{7, 1, -1}, flat, {2, 0})), std::pair(4, 3));
  EXPECT_EQ(range(chunk_layers(LayerSplit{7, -1, 1}, flat, {1, 0})), std::pair(3, 3));
  // Every layer once, in order, for several splits and shapes.
  for (const LayerSplit& sp : {LayerSplit{12, 2, -1}, LayerSplit{12, -1, 4}, LayerSplit{12, 4, 4}, LayerSplit{12}})
    for (int v : {1, 2}) {
      const ScheduleShape sh{3, 6, v};
      try {
        validate_layer_split(sp, sh);
      } catch (const Error&) {
        continue;  // that split does not cut into v chunks per stage
      }
      std::vector<int> owner(12, -1);
      for (int st = 0; st < 3; ++st)
        for (int k = 0; k < v; ++k) {
          const LayerRange r = chunk_layers(sp, sh, {st, k});
          for (int l = r.first; l < r.first + r.count; ++l) {
            ASSERT_EQ(owner[l], -1) << "layer " << l << " twice";
            owner[l] = k * 3 + st;  // the model-chunk order: chunk k of stage st
          }
        }
      for (int l = 1; l < 12; ++l) EXPECT_LE(owner[l - 1], owner[l]) << "layers out of order at " << l;
    }
}

TEST(Schedules, UnevenSplitErrorsNameTheFlags) {
  auto error = [](const LayerSplit& split, const ScheduleShape& shape) {
    try {
      validate_layer_split(split, shape);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error({6, 2, -1}, {1, 1, 1}),
            "--decoder-first-pipeline-num-layers=2: an uneven split needs --pipeline-model-parallel-size > 1");
  EXPECT_EQ(error({6, 2, 3}, {2, 2, 1}),
            "--decoder-first-pipeline-num-layers=2 and --decoder-last-pipeline-num-layers=3: the first and last stage "
            "must hold all --num-layers=6 on 2 pipeline stages");
  EXPECT_EQ(error({8, 1, 2}, {4, 4, 1}),
            "--decoder-first-pipeline-num-layers=1 and --decoder-last-pipeline-num-layers=2: leaves 5 of --num-layers=8 "
            "for the 2 other pipeline stages, which must split them evenly (at least one each)");
  EXPECT_EQ(error({7, 1, -1}, {2, 2, 2}),
            "--decoder-first-pipeline-num-layers=1: pipeline stage 0's 1 layers do not split over its 2 virtual stages");
  EXPECT_EQ(error({7, 1, -1}, {2, 2, 1}), "accepted");
}

// --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split (Megatron-Core's
// get_num_layers_to_build and get_transformer_layer_offset): the embedding and the loss count as layers.
TEST(Schedules, AccountedSplitCountsTheEmbeddingAndTheLossAsLayers) {
  auto range = [](LayerRange r) { return std::pair{r.first, r.count}; };
  // 6 layers + embedding + loss = 8 over 4 stages: 1, 2, 2, 1 transformer layers.
  const LayerSplit both{6, -1, -1, true, true};
  const ScheduleShape four{4, 4, 1};
  EXPECT_EQ(range(chunk_layers(both, four, {0, 0})), std::pair(0, 1));
  EXPECT_EQ(range(chunk_layers(both, four, {1, 0})), std::pair(1, 2));
  EXPECT_EQ(range(chunk_layers(both, four, {2, 0})), std::pair(3, 2));
  EXPECT_EQ(range(chunk_layers(both, four, {3, 0})), std::pair(5, 1));
  for (int st = 0; st < 4; ++st) EXPECT_EQ(stage_layer_count(both, 4, st), st == 0 || st == 3 ? 1 : 2);
  // Interleaved: 10 + 2 = 12 over 3 stages x 2 chunks, 2 counted layers per model chunk; model chunk m is
  // chunk m / 3 of stage m % 3. The first holds the embedding and one layer, the last one layer and the loss.
  const LayerSplit ten{10, -1, -1, true, true};
  const ScheduleShape interleaved{3, 6, 2};
  EXPECT_EQ(range(chunk_layers(ten, interleaved, {0, 0})), std::pair(0, 1));
  EXPECT_EQ(range(chunk_layers(ten, interleaved, {1, 0})), std::pair(1, 2));
  EXPECT_EQ(range(chunk_layers(ten, interleaved, {2, 0})), std::pair(3, 2));
  EXPECT_EQ(range(chunk_layers(ten, interleaved, {0, 1})), std::pair(5, 2));
  EXPECT_EQ(range(chunk_layers(ten, interleaved, {1, 1})), std::pair(7, 2));
  EXPECT_EQ(range(chunk_layers(ten, interleaved, {2, 1})), std::pair(9, 1));
  EXPECT_EQ(stage_layer_count(ten, 3, 0), 3);
  EXPECT_EQ(stage_layer_count(ten, 3, 2), 3);
  // One end alone: 7 + 1 = 8 over 2 stages.
  EXPECT_EQ(range(chunk_layers(LayerSplit{7, -1, -1, true, false}, {2, 2, 1}, {0, 0})), std::pair(0, 3));
  EXPECT_EQ(range(chunk_layers(LayerSplit{7, -1, -1, true, false}, {2, 2, 1}, {1, 0})), std::pair(3, 4));
  EXPECT_EQ(range(chunk_layers(LayerSplit{7, -1, -1, false, true}, {2, 2, 1}, {1, 0})), std::pair(4, 3));
  // A stage may hold the embedding (or the loss) alone, as in Megatron-Core: 2 + 2 = 4 over 4 stages.
  EXPECT_EQ(range(chunk_layers(LayerSplit{2, -1, -1, true, true}, four, {0, 0})).second, 0);
  EXPECT_EQ(range(chunk_layers(LayerSplit{2, -1, -1, true, true}, four, {3, 0})), std::pair(2, 0));
  // Every layer once, in model-chunk order.
  for (const LayerSplit& sp : {LayerSplit{10, -1, -1, true, true}, LayerSplit{11, -1, -1, true, false},
                               LayerSplit{11, -1, -1, false, true}, LayerSplit{4, -1, -1, true, true}})
    for (int v : {1, 2}) {
      const ScheduleShape sh{3, 6, v};
      validate_layer_split(sp, sh);
      std::vector<int> owner(sp.num_layers, -1);
      for (int st = 0; st < 3; ++st)
        for (int k = 0; k < v; ++k) {
          const LayerRange r = chunk_layers(sp, sh, {st, k});
          for (int l = r.first; l < r.first + r.count; ++l) {
            ASSERT_EQ(owner[l], -1) << "layer " << l << " twice";
            owner[l] = k * 3 + st;
          }
        }
      for (int l = 0; l < sp.num_layers; ++l) EXPECT_NE(owner[l], -1) << "layer " << l << " nowhere";
      for (int l = 1; l < sp.num_layers; ++l) EXPECT_LE(owner[l - 1], owner[l]) << "layers out of order at " << l;
    }
}

TEST(Schedules, AccountedSplitErrorsNameTheFlagsAndTheRule) {
  auto error = [](const LayerSplit& split, const ScheduleShape& shape) {
    try {
      validate_layer_split(split, shape);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error({6, -1, -1, true, false}, {4, 4, 1}),
            "--account-for-embedding-in-pipeline-split: --num-layers=6 + 1 (the embedding) = 7 must be divisible by "
            "--pipeline-model-parallel-size=4");
  EXPECT_EQ(error({6, -1, -1, true, true}, {2, 4, 3}),
            "--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split: --num-layers=6 + 1 "
            "(the embedding) + 1 (the loss) = 8 gives each of the 2 pipeline stages 4 layers, which must be divisible "
            "by its 3 virtual stages");
  EXPECT_EQ(error({6, 2, -1, false, true}, {2, 4, 1}),
            "--account-for-loss-in-pipeline-split cannot be combined with --decoder-first-pipeline-num-layers or "
            "--decoder-last-pipeline-num-layers (as in Megatron-Core: give one way of splitting the layers)");
  ScheduleShape v{2, 4, 2};
  v.zero_bubble = ZeroBubble::V;
  EXPECT_NE(error({6, -1, -1, true, true}, v).find("cannot be combined with --zero-bubble-v-schedule"), std::string::npos);
  EXPECT_EQ(error({6, -1, -1, true, true}, {1, 1, 1}), "accepted");  // one stage: all of them, as Megatron
  EXPECT_EQ(error({7, -1, -1, false, true}, {4, 4, 1}), "accepted");
}

}  // namespace
}  // namespace tessera::pipeline
