#include "train/straggler_report.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "comm/process_group.h"
#include "core/check.h"
#include "core/tensor.h"

namespace tessera::train {

std::vector<RankTimes> gather_rank_times(comm::ProcessGroup* world, const RankTimes& mine) {
  if (world == nullptr || world->size() == 1) return {mine};
  constexpr int kFields = 3;
  Tensor in = Tensor::empty({kFields}, DType::F32, Device::cpu());  // host values
  in.host_f32()[0] = static_cast<float>(mine.step_ms);
  in.host_f32()[1] = static_cast<float>(mine.compute_ms);
  in.host_f32()[2] = static_cast<float>(mine.communication_ms);
  Tensor all = Tensor::empty({world->size() * kFields}, DType::F32, Device::cpu());
  world->all_gather(in, all);
  std::vector<RankTimes> out(static_cast<size_t>(world->size()));
  for (size_t r = 0; r < out.size(); ++r)
    out[r] = {all.host_f32()[r * kFields], all.host_f32()[r * kFields + 1], all.host_f32()[r * kFields + 2]};
  return out;
}

std::string straggler_report(const std::vector<RankTimes>& ranks, int64_t count, int64_t iteration) {
  TESSERA_CHECK(!ranks.empty(), "straggler_report: no ranks");
  std::vector<double> compute;
  for (const RankTimes& t : ranks) compute.push_back(t.compute_ms);
  std::sort(compute.begin(), compute.end());
  const size_t n = compute.size();
  const double median = n % 2 ? compute[n / 2] : (compute[n / 2 - 1] + compute[n / 2]) / 2;
  // Ranks by compute time, slowest first (the lower rank first among equals).
  std::vector<int> order(ranks.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return ranks[a].compute_ms > ranks[b].compute_ms; });
  const auto describe = [&](int r) {
    const RankTimes& t = ranks[static_cast<size_t>(r)];
    char buf[160];
    std::snprintf(buf, sizeof buf, "rank %d %.2fx (step %.1f, compute %.1f, communication %.1f)", r,
                  median > 0 ? t.compute_ms / median : 1.0, t.step_ms, t.compute_ms, t.communication_ms);
    return std::string(buf);
  };
  const size_t shown = std::min(static_cast<size_t>(std::max<int64_t>(count, 1)), ranks.size());
  std::string slowest, fastest;
  for (size_t i = 0; i < shown; ++i) {
    slowest += str_cat(i ? ", " : "", describe(order[i]));
    fastest += str_cat(i ? ", " : "", describe(order[order.size() - 1 - i]));
  }
  char med[64];
  std::snprintf(med, sizeof med, "%.1f", median);
  return str_cat(" > straggler report at iteration ", iteration, " (ms per iteration; ratio: compute over the median ",
                 med, " of ", ranks.size(), " ranks) | slowest: ", slowest, " | fastest: ", fastest);
}

namespace {

// TESSERA_STRAGGLER_DELAY_MS, read once: (rank, milliseconds).
std::optional<std::pair<int, int>> straggler_delay() {
  const char* value = std::getenv("TESSERA_STRAGGLER_DELAY_MS");
  if (value == nullptr || *value == '\0') return std::nullopt;
  std::istringstream in(value);
  int rank = -1, ms = -1;
  char colon = 0;
  in >> rank >> colon >> ms;
  TESSERA_CHECK(in && in.peek() == EOF && colon == ':' && rank >= 0 && ms >= 0, "TESSERA_STRAGGLER_DELAY_MS=", value,
                ": expected RANK:MILLISECONDS");
  return std::pair{rank, ms};
}

}  // namespace

void maybe_delay_straggler(int world_rank) {
  static const std::optional<std::pair<int, int>> delay = straggler_delay();
  if (delay && delay->first == world_rank) std::this_thread::sleep_for(std::chrono::milliseconds(delay->second));
}

}  // namespace tessera::train
