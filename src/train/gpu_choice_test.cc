// Which GPU a rank uses and how much of it: by local rank modulo the visible GPUs, --device cuda:N
// winning, several ranks on one GPU counted and capped, and the launchers' variables read or refused.
#include "train/gpu_choice.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/check.h"

namespace tessera::train {
namespace {

LocalRank from(const std::map<std::string, std::string>& env) {
  return local_rank_from([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(GpuChoice, TheLocalRankComesFromOpenMpiThenSlurm) {
  LocalRank l = from({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}, {"SLURM_LOCALID", "1"}});
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.size, 8);
  EXPECT_EQ(l.source, "OMPI_COMM_WORLD_LOCAL_RANK");
  l = from({{"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}});
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.size, 4);
  EXPECT_EQ(l.source, "SLURM_LOCALID");
  EXPECT_EQ(from({{"SLURM_LOCALID", "0"}, {"SLURM_TASKS_PER_NODE", "2,1"}}).size, 2);
  l = from({});
  EXPECT_EQ(l.rank, -1);
  EXPECT_EQ(l.source, "");
  // Without a size, only this rank is known to be on the node.
  EXPECT_EQ(from({{"OMPI_COMM_WORLD_LOCAL_RANK", "2"}}).size, 3);
}

TEST(GpuChoice, ALocalRankThatIsNotANumberIsRefusedByName) {
  for (const char* bad : {"", "x", "-1", "1.5"}) {
    try {
      from({{"OMPI_COMM_WORLD_LOCAL_RANK", bad}});
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), str_cat("OMPI_COMM_WORLD_LOCAL_RANK='", bad,
                                               "': must be a non-negative whole number (the launcher sets it)"));
    }
  }
}

TEST(GpuChoice, OneGpuPerRankByLocalRankModuloTheVisibleGpus) {
  // 8 ranks on a node of 8 GPUs: rank r on cuda:r, alone.
  for (int r = 0; r < 8; ++r) {
    const GpuChoice c = choose_gpu(std::nullopt, 8, {r, 8, "OMPI_COMM_WORLD_LOCAL_RANK"});
    EXPECT_EQ(c.ordinal, r);
    EXPECT_EQ(c.ranks_sharing, 1);
  }
  EXPECT_EQ(choose_gpu(std::nullopt, 8, {5, 8, "SLURM_LOCALID"}).reason,
            "local rank 5 of 8 (SLURM_LOCALID), 8 visible GPUs");
  // CUDA_VISIBLE_DEVICES=2,3 leaves two: ranks 0..3 on cuda:0, cuda:1, cuda:0, cuda:1.
  EXPECT_EQ(choose_gpu(std::nullopt, 2, {3, 4, "OMPI_COMM_WORLD_LOCAL_RANK"}).ordinal, 1);
}

TEST(GpuChoice, RanksBeyondTheGpusShareThemAndAreCounted) {
  GpuChoice c = choose_gpu(std::nullopt, 1, {1, 2, "OMPI_COMM_WORLD_LOCAL_RANK"});
  EXPECT_EQ(c.ordinal, 0);
  EXPECT_EQ(c.ranks_sharing, 2);
  EXPECT_EQ(c.reason, "local rank 1 of 2 (OMPI_COMM_WORLD_LOCAL_RANK), 1 visible GPU, shared by 2 ranks");
  // 5 ranks on 2 GPUs: cuda:0 holds ranks 0, 2, 4 and cuda:1 ranks 1, 3.
  EXPECT_EQ(choose_gpu(std::nullopt, 2, {4, 5, "x"}).ranks_sharing, 3);
  EXPECT_EQ(choose_gpu(std::nullopt, 2, {3, 5, "x"}).ranks_sharing, 2);
}

TEST(GpuChoice, DeviceCudaNWinsAndIsSharedByTheNodesRanks) {
  GpuChoice c = choose_gpu(1, 4, {3, 4, "OMPI_COMM_WORLD_LOCAL_RANK"});
  EXPECT_EQ(c.ordinal, 1);
  EXPECT_EQ(c.ranks_sharing, 4);
  EXPECT_EQ(c.reason, "--device cuda:1, shared by 4 ranks");
  c = choose_gpu(0, 1, {});
  EXPECT_EQ(c.ordinal, 0);
  EXPECT_EQ(c.ranks_sharing, 1);
  EXPECT_EQ(c.reason, "--device cuda:0");
}

TEST(GpuChoice, WithoutALauncherItIsTheFirstGpu) {
  const GpuChoice c = choose_gpu(std::nullopt, 4, {});
  EXPECT_EQ(c.ordinal, 0);
  EXPECT_EQ(c.ranks_sharing, 1);
  EXPECT_EQ(c.reason, "cuda:0: no local rank from the launcher (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID)");
}

TEST(GpuChoice, SharedGpusCapEachProcessAtAnEqualShare) {
  const size_t mib = size_t{1} << 20, total = size_t{80} << 30;  // an 80 GiB GPU
  EXPECT_EQ(shared_gpu_memory_cap(total, 1), 0u);               // alone: the allocator's own limit
  EXPECT_EQ(shared_gpu_memory_cap(total, 2), total / 10 * 9 / 2 / mib * mib);
  EXPECT_LE(4 * shared_gpu_memory_cap(total, 4), total / 10 * 9);
  EXPECT_EQ(shared_gpu_memory_cap(total, 4) % mib, 0u);
}

}  // namespace
}  // namespace tessera::train
