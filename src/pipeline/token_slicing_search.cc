#include "pipeline/token_slicing_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace tessera::pipeline {

double token_pipeline_latency(const std::vector<int64_t>& slices, const SliceCost& t, int64_t micro_batches,
                              int stages, double sequence_seconds) {
  double sum = 0, worst = 0;
  int64_t context = 0;
  for (int64_t l : slices) {
    const double ti = t(l, context);
    sum += ti;
    worst = std::max(worst, ti);
    context += l;
  }
  return static_cast<double>(micro_batches) * (sum + sequence_seconds) + (stages - 1) * worst;
}

std::vector<int64_t> best_token_slicing(int64_t length, int64_t unit, const SliceCost& t, int64_t micro_batches,
                                        int stages) {
  TESSERA_CHECK(unit > 0 && length > 0 && length % unit == 0, "token slicing: a sequence of ", length,
                " tokens is not a positive multiple of the unit ", unit);
  const int64_t n = length / unit;
  // cost[k][c]: a slice of k units after c units; the candidate bounds are all of them.
  std::vector<std::vector<double>> cost(n + 1);
  std::vector<double> bounds;
  for (int64_t k = 1; k <= n; ++k) {
    cost[k].resize(n - k + 1);
    for (int64_t c = 0; c + k <= n; ++c) bounds.push_back(cost[k][c] = t(k * unit, c * unit));
  }
  std::sort(bounds.begin(), bounds.end());
  const double inf = std::numeric_limits<double>::infinity();
  double best = inf;
  std::vector<int64_t> best_slices;
  std::vector<double> sum(n + 1), used(n + 1);
  std::vector<int64_t> last(n + 1);
  double previous = -inf;
  for (double t_max : bounds) {
    if ((stages - 1) * t_max > best) break;  // every later candidate costs at least this much
    if (t_max - previous <= 1e-12 * std::abs(t_max)) continue;  // the same bound again
    previous = t_max;
    sum[0] = 0;
    used[0] = 0;
    for (int64_t end = 1; end <= n; ++end) {
      sum[end] = inf;
      for (int64_t k = 1; k <= end; ++k) {
        const double tk = cost[k][end - k];
        if (tk > t_max || sum[end - k] == inf) continue;
        if (sum[end - k] + tk < sum[end]) {
          sum[end] = sum[end - k] + tk;
          used[end] = std::max(used[end - k], tk);
          last[end] = k;
        }
      }
    }
    if (sum[n] == inf) continue;
    const double latency = static_cast<double>(micro_batches) * sum[n] + (stages - 1) * used[n];
    if (latency < best) {
      best = latency;
      best_slices.clear();
      for (int64_t end = n; end > 0; end -= last[end]) best_slices.push_back(last[end] * unit);
      std::reverse(best_slices.begin(), best_slices.end());
    }
  }
  return best_slices;
}

}  // namespace tessera::pipeline
