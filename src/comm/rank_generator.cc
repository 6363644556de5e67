#include "comm/rank_generator.h"

#include <algorithm>
#include <cctype>

#include "core/check.h"

namespace tessera::comm {

namespace {

constexpr const char* kTokens[kNumDims] = {"tp", "cp", "ep", "dp", "pp"};
// Megatron appends omitted tokens in the order of its name_to_size table (tp, pp, dp, ep, cp); only
// size-1 dimensions may be omitted, so this changes no rank, but it keeps order() identical to its.
constexpr Dim kAppendOrder[kNumDims] = {Dim::Tp, Dim::Pp, Dim::Dp, Dim::Ep, Dim::Cp};

int index_of(Dim d) { return static_cast<int>(d); }

}  // namespace

const char* dim_token(Dim d) { return kTokens[index_of(d)]; }

int DimSizes::product() const {
  int p = 1;
  for (int s : size) p *= s;
  return p;
}

RankGenerator::RankGenerator(const DimSizes& sizes, const std::string& order) : sizes_(sizes) {
  std::string lower = order;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::array<bool, kNumDims> seen{};
  int n = 0;
  size_t start = 0;
  while (start <= lower.size()) {
    const size_t dash = std::min(lower.find('-', start), lower.size());
    const std::string token = lower.substr(start, dash - start);
    const auto it = std::find_if(std::begin(kTokens), std::end(kTokens), [&](const char* t) { return token == t; });
    TESSERA_CHECK(it != std::end(kTokens), "the rank order \"", order, "\" has the token \"", token,
                  "\": each token must be one of tp, cp, ep, dp, pp");
    const int d = static_cast<int>(it - std::begin(kTokens));
    TESSERA_CHECK(!seen[d], "the rank order \"", order, "\" names ", token, " twice: each token may appear once");
    seen[d] = true;
    order_[n++] = static_cast<Dim>(d);
    start = dash + 1;
  }
  for (Dim d : kAppendOrder) {
    if (seen[index_of(d)]) continue;
    TESSERA_CHECK(sizes_[d] == 1, "the rank order \"", order, "\" leaves out ", dim_token(d), ", whose size is ",
                  sizes_[d], ": only a dimension of size 1 may be left out");
    order_[n++] = d;
  }
  int stride = 1;
  for (Dim d : order_) {
    stride_[index_of(d)] = stride;
    stride *= sizes_[d];
  }
}

std::string RankGenerator::order() const {
  std::string s;
  for (Dim d : order_) {
    if (!s.empty()) s += '-';
    s += dim_token(d);
  }
  return s;
}

std::vector<std::vector<int>> RankGenerator::ranks(const std::vector<Dim>& dims) const {
  // The dimensions inside a group and those that tell the groups apart, each in the order's sequence:
  // a group's members count up its own digits (earliest fastest), the groups count up the others.
  std::vector<Dim> inside, across;
  for (Dim d : order_) (std::find(dims.begin(), dims.end(), d) != dims.end() ? inside : across).push_back(d);
  // The world rank of the index-th combination of digits over `ds` (mixed radix, first fastest).
  auto offset = [this](const std::vector<Dim>& ds, int index) {
    int rank = 0;
    for (Dim d : ds) {
      rank += index % sizes_[d] * stride_[index_of(d)];
      index /= sizes_[d];
    }
    return rank;
  };
  int group_size = 1;
  for (Dim d : inside) group_size *= sizes_[d];
  const int groups = world_size() / group_size;
  std::vector<std::vector<int>> out(groups);
  for (int g = 0; g < groups; ++g) {
    const int base = offset(across, g);
    for (int i = 0; i < group_size; ++i) out[g].push_back(base + offset(inside, i));
  }
  return out;
}

DimSizes RankGenerator::coordinates(int world_rank) const {
  TESSERA_CHECK(world_rank >= 0 && world_rank < world_size(), "rank ", world_rank, " is outside a world of ",
                world_size());
  DimSizes c;
  for (int d = 0; d < kNumDims; ++d) c.size[d] = world_rank / stride_[d] % sizes_.size[d];
  return c;
}

int RankGenerator::world_rank(const DimSizes& c) const {
  int rank = 0;
  for (int d = 0; d < kNumDims; ++d) {
    TESSERA_CHECK(c.size[d] >= 0 && c.size[d] < sizes_.size[d], "the ", kTokens[d], " coordinate ", c.size[d],
                  " is outside its size ", sizes_.size[d]);
    rank += c.size[d] * stride_[d];
  }
  return rank;
}

}  // namespace tessera::comm
