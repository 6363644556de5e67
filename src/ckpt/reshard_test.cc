// plan_copy against the definition: element i of a box's storage is the element of the full tensor
// whose coordinate in the box's view is the storage coordinate shifted by `begin` along `dim`.
#include "ckpt/reshard.h"

#include <gtest/gtest.h>

#include <map>

namespace tessera::ckpt {
namespace {

// Full-tensor flat index of every element of the box's storage.
std::vector<int64_t> global_indices(const Box& b) {
  std::vector<int64_t> out;
  Shape shape = b.shape();
  for (int64_t i = 0; i < b.numel(); ++i) {
    int64_t global = 0, stride = 1, rest = i;
    for (int d = static_cast<int>(b.view.size()) - 1; d >= 0; --d) {
      int64_t coord = rest % shape[d] + (d == b.dim ? b.begin : 0);
      rest /= shape[d];
      global += coord * stride;
      stride *= b.view[d];
    }
    out.push_back(global);
  }
  return out;
}

// Copies with the plan and checks every wanted element against the full tensor (value = flat index).
void check(const Box& saved, const Box& wanted) {
  SCOPED_TRACE(str_cat("saved ", shape_str(saved.view), " dim ", saved.dim, " [", saved.begin, ",", saved.end,
                       ") wanted ", shape_str(wanted.view), " dim ", wanted.dim, " [", wanted.begin, ",", wanted.end, ")"));
  std::vector<int64_t> src = global_indices(saved), want = global_indices(wanted);
  std::map<int64_t, int64_t> held;  // global index -> saved storage index
  for (size_t i = 0; i < src.size(); ++i) held[src[i]] = static_cast<int64_t>(i);
  std::vector<int64_t> dst(want.size(), -1);
  for (const CopyRun& r : plan_copy(saved, wanted))
    for (int64_t k = 0; k < r.count; ++k) {
      ASSERT_EQ(dst[r.dst + k], -1) << "element written twice";
      dst[r.dst + k] = src[r.src + k];
    }
  for (size_t i = 0; i < want.size(); ++i) {
    if (held.count(want[i]))
      EXPECT_EQ(dst[i], want[i]) << "wanted element " << i;
    else
      EXPECT_EQ(dst[i], -1) << "wanted element " << i << " is not in the saved box";
  }
}

TEST(Reshard, EverySplitOfAColumnAndRowParallelWeight) {
  const Shape full{8, 6};
  for (int ns : {1, 2, 4})
    for (int nw : {1, 2, 4})
      for (int dim : {0, 1})
        for (int s = 0; s < ns; ++s)
          for (int w = 0; w < nw; ++w) {
            int64_t ls = full[dim] / ns, lw = full[dim] / nw;
            Box saved = ns == 1 ? Box::whole(full) : Box{full, dim, s * ls, (s + 1) * ls};
            Box wanted = nw == 1 ? Box::whole(full) : Box{full, dim, w * lw, (w + 1) * lw};
            check(saved, wanted);
          }
}

TEST(Reshard, SwigluViewAgainstTheWholeTensorAndAcrossSplits) {
  // fc1 [2F, H] = [2*4, 3] seen as [2, 4, 3] and split along the F dimension.
  const Shape view{2, 4, 3};
  for (int ns : {1, 2, 4})
    for (int nw : {1, 2, 4})
      for (int s = 0; s < ns; ++s)
        for (int w = 0; w < nw; ++w) {
          Box saved = ns == 1 ? Box::whole({8, 3}) : Box{view, 1, s * 4 / ns, (s + 1) * 4 / ns};
          Box wanted = nw == 1 ? Box::whole({8, 3}) : Box{view, 1, w * 4 / nw, (w + 1) * 4 / nw};
          check(saved, wanted);
        }
}

TEST(Reshard, UnrelatedViewsFallBackToElements) {
  check(Box{{2, 4, 3}, 1, 1, 3}, Box{{8, 3}, 0, 2, 6});
  check(Box{{4, 6}, 1, 2, 4}, Box{{2, 4, 3}, 2, 1, 2});
}

TEST(Reshard, LimitKeepsRowsBelowIt) {
  // Rows [0, 5) of a [8, 2] tensor: the rest of the wanted box is left alone.
  std::vector<CopyRun> runs = plan_copy(Box{{8, 2}, 0, 0, 8}, Box{{8, 2}, 0, 4, 8}, 5);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], (CopyRun{8, 0, 2}));
  EXPECT_TRUE(plan_copy(Box{{8, 2}, 0, 0, 4}, Box{{8, 2}, 0, 4, 8}).empty());
}

TEST(Reshard, BoxesOfDifferentTensorsAreAnError) {
  EXPECT_THROW(plan_copy(Box::whole({4, 3}), Box::whole({4, 4})), Error);
}

}  // namespace
}  // namespace tessera::ckpt
