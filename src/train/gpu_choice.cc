#include "train/gpu_choice.h"

#include "core/check.h"

namespace tessera::train {

namespace {

// The leading decimal number of `text` ("2(x3)" -> 2); an Error naming `variable` where there is none.
int leading_count(const char* variable, const char* text, bool whole) {
  const std::string s(text);
  size_t digits = 0;
  while (digits < s.size() && digits < 9 && s[digits] >= '0' && s[digits] <= '9') ++digits;
  TESSERA_CHECK(digits > 0 && (!whole || digits == s.size()), variable, "='", s,
                "': must be a non-negative whole number (the launcher sets it)");
  return std::stoi(s.substr(0, digits));
}

}  // namespace

LocalRank local_rank_from(const std::function<const char*(const char*)>& getenv) {
  LocalRank l;
  if (const char* r = getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    l.rank = leading_count("OMPI_COMM_WORLD_LOCAL_RANK", r, true);
    if (const char* n = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
      l.size = leading_count("OMPI_COMM_WORLD_LOCAL_SIZE", n, true);
    l.source = "OMPI_COMM_WORLD_LOCAL_RANK";
  } else if (const char* r = getenv("SLURM_LOCALID")) {
    l.rank = leading_count("SLURM_LOCALID", r, true);
    if (const char* n = getenv("SLURM_TASKS_PER_NODE")) l.size = leading_count("SLURM_TASKS_PER_NODE", n, false);
    l.source = "SLURM_LOCALID";
  }
  // A size that does not hold the rank says nothing about the others: only this rank is known.
  if (l.size <= l.rank) l.size = l.rank + 1;
  return l;
}

GpuChoice choose_gpu(std::optional<int> named, int visible, const LocalRank& local) {
  TESSERA_CHECK(visible >= 1, "choose_gpu: no visible GPU");
  GpuChoice c;
  const int ranks = local.rank >= 0 ? local.size : 1;
  auto gpus = [](int n) { return str_cat(n, " visible GPU", n == 1 ? "" : "s"); };
  if (named) {
    // Every rank of the node is given the same flag, so they all use this GPU.
    c.ordinal = *named;
    c.ranks_sharing = ranks;
    c.reason = str_cat("--device cuda:", *named);
  } else if (local.rank < 0) {
    c.reason = str_cat("cuda:0: no local rank from the launcher (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID)");
  } else {
    c.ordinal = local.rank % visible;
    // Local ranks r with r % visible == ordinal.
    c.ranks_sharing = ranks / visible + (c.ordinal < ranks % visible ? 1 : 0);
    c.reason = str_cat("local rank ", local.rank, " of ", ranks, " (", local.source, "), ", gpus(visible));
  }
  if (c.ranks_sharing > 1) c.reason += str_cat(", shared by ", c.ranks_sharing, " ranks");
  return c;
}

size_t shared_gpu_memory_cap(size_t total_bytes, int ranks_sharing) {
  if (ranks_sharing <= 1) return 0;
  const size_t usable = total_bytes / 10 * 9;
  return usable / static_cast<size_t>(ranks_sharing) / (size_t{1} << 20) * (size_t{1} << 20);  // whole MiB
}

}  // namespace tessera::train
