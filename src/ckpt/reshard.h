// Resharding: which elements of a saved slice of a tensor go where in the slice a rank wants.
//
// Every slice of a tensor, saved or wanted, is a Box: the range [begin, end) along dimension `dim` of
// the full tensor seen as `view` (a row-major reshaping of it; for example a SwiGLU fc1 weight [2F, H]
// seen as [2, F, H] and split along dimension 1, so that a shard holds rows of both halves). A box's
// elements are stored row-major in the box's own shape (the view with end - begin along dim), which is
// how a rank holds its shard of a parameter (model::Sharding) and how a checkpoint file stores it.
// Two boxes of one tensor may use different views; copying between them is a list of contiguous runs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera::ckpt {

struct Box {
  Shape view;
  int dim = 0;
  int64_t begin = 0, end = 0;

  // All of a tensor of this shape.
  static Box whole(const Shape& shape);
  bool is_whole() const { return begin == 0 && end == view.at(static_cast<size_t>(dim)); }
  int64_t numel() const;
  // The box's elements, as stored: the view with end - begin along dim.
  Shape shape() const;
  bool operator==(const Box&) const = default;
};

// A contiguous run: `count` elements from element `src` of the saved box's storage to element `dst`
// of the wanted box's storage.
struct CopyRun {
  int64_t src = 0, dst = 0, count = 0;
  bool operator==(const CopyRun&) const = default;
};

// The runs that copy the elements the two boxes share (both describe one tensor, whose flat size the
// views must agree on). Only elements whose coordinate along the common split dimension is below
// `limit` are copied (limit < 0: no limit); see vocabulary padding in checkpoint.cc.
std::vector<CopyRun> plan_copy(const Box& saved, const Box& wanted, int64_t limit = -1);

// The number of elements the runs copy.
int64_t copied_elements(const std::vector<CopyRun>& runs);

}  // namespace tessera::ckpt
