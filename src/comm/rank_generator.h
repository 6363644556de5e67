// Megatron-Core's RankGenerator: world ranks laid out as a mixed-radix number whose digits are the
// parallel dimensions in the order string (the first token varies fastest), and the groups of one or
// more dimensions that it defines. ParallelState uses two of them over the same world, as
// Megatron-Core does: the dense one over (tp, cp, dp, pp) and the expert one over (etp, ep, edp, pp)
// (MoE "parallel folding"). Pure: no communication.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace tessera::comm {

// The five tokens of Megatron's order string, e.g. "tp-cp-ep-dp-pp".
enum class Dim { Tp = 0, Cp, Ep, Dp, Pp };
inline constexpr int kNumDims = 5;
const char* dim_token(Dim d);

// The sizes of the five dimensions; their product is the world size.
struct DimSizes {
  std::array<int, kNumDims> size{1, 1, 1, 1, 1};
  int& operator[](Dim d) { return size[static_cast<int>(d)]; }
  int operator[](Dim d) const { return size[static_cast<int>(d)]; }
  int product() const;
};

class RankGenerator {
 public:
  // order: tokens separated by '-', each at most once (case-insensitive). As in Megatron, a token left
  // out is appended at the end, which is only allowed for a dimension of size 1 (where its place does
  // not matter). Throws an Error naming the order and the offending token otherwise.
  RankGenerator(const DimSizes& sizes, const std::string& order);

  int world_size() const { return sizes_.product(); }
  // The full order, with any omitted tokens appended (e.g. "tp-ep-dp-pp" -> "tp-ep-dp-pp-cp").
  std::string order() const;

  // Every group spanning the given dimensions (and agreeing on all others), each listing its world
  // ranks by increasing rank in the group, the groups ordered by the remaining dimensions' digits (the
  // earliest in the order fastest): Megatron's get_ranks("tp-pp") is ranks({Dim::Tp, Dim::Pp}).
  std::vector<std::vector<int>> ranks(const std::vector<Dim>& dims) const;

  // A rank's digit along each dimension, and back.
  DimSizes coordinates(int world_rank) const;
  int world_rank(const DimSizes& coordinates) const;

 private:
  DimSizes sizes_;
  std::array<Dim, kNumDims> order_{};  // order_[0] varies fastest
  std::array<int, kNumDims> stride_{};  // by Dim: the world-rank step of one unit of that digit
};

}  // namespace tessera::comm
