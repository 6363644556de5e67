// The rows each expert gets in the MoE benchmarks: `rows` split in proportion to
// 1 + 0.5 sin(e + phase), a fixed mild imbalance like dropless routing's (the same on every run).
#pragma once

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

inline std::vector<int64_t> imbalanced_expert_counts(int64_t rows, int experts, int phase) {
  std::vector<double> w(experts);
  for (int e = 0; e < experts; ++e) w[e] = 1.0 + 0.5 * std::sin(static_cast<double>(e + phase));
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<int64_t> counts(experts);
  int64_t given = 0;
  for (int e = 0; e < experts; ++e) given += counts[e] = static_cast<int64_t>(rows * w[e] / total);
  counts[0] += rows - given;
  return counts;
}
