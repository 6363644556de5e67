#include "parallel/tensor_parallel.h"

namespace tessera::parallel {

const TensorParallelContext& TensorParallelContext::single_process() {
  static std::unique_ptr<comm::ProcessGroup> group = comm::make_single_process_group("tensor");
  static TensorParallelContext ctx{group.get(), false};
  return ctx;
}

Tensor gather_rows(const Tensor& local, comm::ProcessGroup& group) {
  if (group.size() == 1) return local;
  Shape shape = local.shape();
  shape[0] *= group.size();
  Tensor full = Tensor::empty(shape, local.dtype());
  group.all_gather(local, full);
  return full;
}

Tensor reduce_scatter_rows(const Tensor& full, comm::ProcessGroup& group) {
  if (group.size() == 1) return full;
  Shape shape = full.shape();
  TESSERA_CHECK(shape[0] % group.size() == 0, "reduce_scatter_rows: ", shape[0], " rows do not split over ",
                group.size(), " ranks of the ", group.name(), " group");
  shape[0] /= group.size();
  Tensor local = Tensor::empty(shape, full.dtype());
  group.reduce_scatter(full, local);
  return local;
}

void all_reduce_sum(const Tensor& t, comm::ProcessGroup& group) {
  if (group.size() > 1) group.all_reduce(t);
}

Tensor gather_to_tensor_parallel(const Tensor& x, const TensorParallelContext& tp) {
  return tp.sequence_parallel ? gather_rows(x, *tp.group) : x;
}

Tensor reduce_to_input(const Tensor& dx_partial, const TensorParallelContext& tp) {
  if (tp.sequence_parallel) return reduce_scatter_rows(dx_partial, *tp.group);
  all_reduce_sum(dx_partial, *tp.group);
  return dx_partial;
}

}  // namespace tessera::parallel
