#include "ckpt/reshard.h"

#include <algorithm>

namespace tessera::ckpt {
namespace {

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t d = from; d < to; ++d) n *= s[d];
  return n;
}

// Same view, same split dimension: for every index of the dimensions before `dim` one run of the
// shared range times the elements after `dim`.
std::vector<CopyRun> plan_aligned(const Box& s, const Box& w, int64_t limit) {
  const size_t d = static_cast<size_t>(w.dim);
  int64_t lo = std::max(s.begin, w.begin), hi = std::min(s.end, w.end);
  if (limit >= 0) hi = std::min(hi, limit);
  std::vector<CopyRun> runs;
  if (lo >= hi) return runs;
  const int64_t outer = product(w.view, 0, d), inner = product(w.view, d + 1, w.view.size());
  const int64_t s_len = s.end - s.begin, w_len = w.end - w.begin;
  for (int64_t o = 0; o < outer; ++o)
    runs.push_back({(o * s_len + lo - s.begin) * inner, (o * w_len + lo - w.begin) * inner, (hi - lo) * inner});
  return runs;
}

// Unrelated views: element by element through the flat index of the full tensor (merging neighbours
// into runs). No layout of today's models needs this; it keeps the loader correct for any future one.
std::vector<CopyRun> plan_elementwise(const Box& s, const Box& w) {
  std::vector<CopyRun> runs;
  const Shape w_shape = w.shape();
  const int64_t n = w.numel();
  for (int64_t i = 0; i < n; ++i) {
    // Wanted storage index -> full flat index.
    int64_t global = 0, stride = 1, rest = i;
    for (int d = static_cast<int>(w.view.size()) - 1; d >= 0; --d) {
      int64_t coord = rest % w_shape[d] + (d == w.dim ? w.begin : 0);
      rest /= w_shape[d];
      global += coord * stride;
      stride *= w.view[d];
    }
    // Full flat index -> saved storage index, if the saved box holds it.
    int64_t src = 0, s_stride = 1;
    bool inside = true;
    rest = global;
    for (int d = static_cast<int>(s.view.size()) - 1; d >= 0; --d) {
      int64_t coord = rest % s.view[d];
      rest /= s.view[d];
      int64_t extent = s.view[d];
      if (d == s.dim) {
        if (coord < s.begin || coord >= s.end) inside = false;
        coord -= s.begin;
        extent = s.end - s.begin;
      }
      src += coord * s_stride;
      s_stride *= extent;
    }
    if (!inside) continue;
    if (!runs.empty() && runs.back().src + runs.back().count == src && runs.back().dst + runs.back().count == i)
      ++runs.back().count;
    else
      runs.push_back({src, i, 1});
  }
  return runs;
}

}  // namespace

Box Box::whole(const Shape& shape) {
  Shape view = shape.empty() ? Shape{1} : shape;
  return {view, 0, 0, view[0]};
}

int64_t Box::numel() const { return shape_numel(shape()); }

Shape Box::shape() const {
  Shape s = view;
  s.at(static_cast<size_t>(dim)) = end - begin;
  return s;
}

std::vector<CopyRun> plan_copy(const Box& saved, const Box& wanted, int64_t limit) {
  TESSERA_CHECK(shape_numel(saved.view) == shape_numel(wanted.view), "a saved slice of view ",
                shape_str(saved.view), " and a wanted slice of view ", shape_str(wanted.view),
                " cannot be parts of one tensor");
  Box s = saved, w = wanted;
  // A box holding the whole tensor can be seen in the other box's view.
  if (s.is_whole())
    s = {w.view, w.dim, 0, w.view[static_cast<size_t>(w.dim)]};
  else if (w.is_whole())
    w = {s.view, s.dim, 0, s.view[static_cast<size_t>(s.dim)]};
  if (s.view == w.view && s.dim == w.dim) return plan_aligned(s, w, limit);
  TESSERA_CHECK(limit < 0, "a limit needs both slices split the same way");
  return plan_elementwise(s, w);
}

int64_t copied_elements(const std::vector<CopyRun>& runs) {
  int64_t n = 0;
  for (const CopyRun& r : runs) n += r.count;
  return n;
}

}  // namespace tessera::ckpt
