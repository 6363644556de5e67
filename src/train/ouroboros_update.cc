// Ouroboros' delayed-gradient update (train/ouroboros_driver.h): the replicas' (or the emulated shares')
// gradients added in one order, the global norm over every module and V, and AdamW per update unit. The
// order of every sum is fixed, so that the one-process emulation and the MPI runs agree bit for bit.
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/adamw.h"
#include "kernels/elementwise.h"
#include "kernels/tensor_ops.h"
#include "train/ouroboros_driver.h"

namespace tessera::train {
namespace {

// Every rank's values gathered over `group`, rank after rank, as int64 bits so that no rank rounds them.
std::vector<double> all_gather_bits(comm::ProcessGroup& group, const std::vector<double>& mine) {
  const int64_t n = static_cast<int64_t>(mine.size());
  Tensor bits = Tensor::empty({n}, DType::I64, Device::cpu());
  std::memcpy(bits.host_i64(), mine.data(), n * sizeof(double));
  Tensor all = Tensor::empty({group.size() * n}, DType::I64, Device::cpu());
  group.all_gather(bits, all);
  std::vector<double> out(static_cast<size_t>(all.numel()));
  std::memcpy(out.data(), all.host_i64(), out.size() * sizeof(double));
  return out;
}

// out = ((parts[0] + parts[1]) + parts[2]) + ...: the one order in which replicas' (or shares')
// gradients are added, wherever that happens, so that the emulation and the replicas agree bit for bit.
// Kernels on the tensors' device (a copy, then one add_into per part: the same fp32 additions, in the
// same order, on the CPU and a GPU).
void add_in_order(const Tensor& out, const std::vector<Tensor>& parts) {
  kernels::copy(out, parts[0]);
  for (size_t d = 1; d < parts.size(); ++d) kernels::add_into(out, parts[d]);
}

// Every rank's `t` gathered over `group` (on t's device), added in rank order into `t`.
void sum_in_rank_order(comm::ProcessGroup& group, const Tensor& t) {
  const int64_t n = t.numel();
  Tensor all = Tensor::empty({group.size() * n}, DType::F32, t.device());
  group.all_gather(t, all);
  std::vector<Tensor> parts;
  for (int r = 0; r < group.size(); ++r) parts.push_back(all.flat_range(r * n, n));
  add_in_order(t, parts);
}

}  // namespace

int OuroborosDriver::replicas() const { return data_ ? data_->size() : 1; }

// Every replica's values (each replica passes one per share: one), in replica order; in one process the
// shares themselves.
std::vector<double> OuroborosDriver::sum_over_replicas(const std::vector<double>& mine) {
  return data_ ? all_gather_bits(*data_, mine) : mine;
}

// Before any update: with D emulated shares, each module's gradient (and V's) is the sum of the shares'
// in share order; with replicas, the sum of the replicas' in replica order (gathered, not all-reduced:
// an all-reduce's order is MPI's choice). Every replica then holds the same gradients.
void OuroborosDriver::reduce_gradients(const std::vector<pipeline::OuroborosStep>& plan,
                                       std::vector<std::vector<Tensor>>& module_shares,
                                       std::vector<std::vector<Tensor>>& tied_shares) {
  for (int k = 0; k < modules(); ++k) {
    if (!holds(k) || plan[k].backward_batch < 0) continue;
    Module& mod = modules_[k];
    if (!module_shares[k].empty()) add_in_order(mod.params->grads(), module_shares[k]);
    if (data_)
      for (model::Parameter& p : mod.params->params())
        if (!is_tied(mod, p)) sum_in_rank_order(*data_, p.grad);
  }
  if (!holds(0)) return;
  for (size_t u = 0; u < tied_.size(); ++u) {
    if (!tied_shares[u].empty()) add_in_order(tied_[u].grad, tied_shares[u]);
    if (data_) sum_in_rank_order(*data_, tied_[u].grad);
  }
}

double OuroborosDriver::global_squares(std::vector<double> module_squares, double tied_squares) {
  const int K = modules();
  if (tp().size() > 1) {
    // Each module's sum and V's over the tensor group, added in tensor-rank order.
    comm::ProcessGroup& group = *tp().group;
    module_squares.push_back(tied_squares);
    const size_t n = module_squares.size();
    const std::vector<double> gathered = all_gather_bits(group, module_squares);
    for (size_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int r = 0; r < group.size(); ++r) sum += gathered[r * n + i];
      module_squares[i] = sum;
    }
    tied_squares = module_squares.back();
    module_squares.pop_back();
  }
  std::vector<double> parts = module_squares;
  if (ring_) {
    // Three slots per rank: its first module's part, rank 0's module K-1 part, V's part (rank 0).
    enum { kFirst, kLast, kTied, kSlots };
    std::vector<double> slots(kSlots, 0.0);
    const int rank = ring_->rank();
    slots[kFirst] = module_squares[rank];
    if (rank == 0) slots[kLast] = module_squares[K - 1], slots[kTied] = tied_squares;
    const std::vector<double> gathered = all_gather_bits(ring_->group(), slots);
    for (int k = 0; k < K; ++k)
      parts[k] = k == K - 1 ? gathered[kLast] : gathered[pipeline::ouroboros_rank_of_module(shape_, k) * kSlots + kFirst];
    tied_squares = gathered[kTied];
  }
  double squares = 0;
  for (int k = 0; k < K; ++k) squares += parts[k];
  return squares + tied_squares;
}

// AdamW over the units that have a gradient this iteration: each module's own parameters but the tied
// ones, and each tied one, V then P (every iteration: module K-1's term is always fresh). The clipping
// norm is over all of them, each tied one once: each module's sum of squares (its parameters in order),
// added in module order, then the tied ones' (V's, then P's).
void OuroborosDriver::update(float lr) {
  const int K = modules();
  std::vector<optim::MomentShard> units(K);
  std::vector<double> module_squares(K, 0.0);
  for (int k = 0; k < K; ++k) {
    if (!holds(k)) continue;
    Module& mod = modules_[k];
    if (mod.last_backward_batch < 0) continue;
    units[k] = {{}, mod.exp_avg, mod.exp_avg_sq, false};
    for (const model::Parameter& p : mod.params->params()) {
      if (is_tied(mod, p)) continue;
      units[k].pieces.push_back({&p, 0, p.value.numel(), p.offset, false});
      // Under tensor parallelism a parameter whole on every tensor rank counts once (tensor rank 0's).
      if (p.spec.sharding.sharded() || tp().size() == 1 || tp().rank() == 0)
        module_squares[k] += kernels::sum_of_squares(p.grad);
    }
  }
  // (V is split over the tensor ranks by vocabulary: every rank's part counts. P is whole on every tensor
  // rank: tensor rank 0's counts.)
  double tied_squares = 0;
  if (holds(0))
    for (size_t u = 0; u < tied_.size(); ++u) {
      const model::Parameter& p = *modules_[0].tied[u];
      if (p.spec.sharding.sharded() || tp().size() == 1 || tp().rank() == 0)
        tied_squares += kernels::sum_of_squares(tied_[u].grad);
    }
  const double norm = std::sqrt(global_squares(std::move(module_squares), tied_squares));
  last_grad_norm_ = norm;
  for (int k = 0; k < K; ++k)
    if (holds(k) && modules_[k].last_backward_batch >= 0)
      optim::adamw_update(units[k], options_.adam, lr, 1.0f, norm, modules_[k].steps);
  if (!holds(0)) return;
  // Each tied unit reads its accumulator through module 0's parameter (whose grad buffer is free now),
  // then the copy in module K-1 takes the same values, as the embedding group keeps the two stages'
  // copies equal.
  for (size_t u = 0; u < tied_.size(); ++u) {
    TiedUnit& unit = tied_[u];
    model::Parameter& v = *modules_[0].tied[u];
    kernels::copy(v.grad, unit.grad);
    optim::MomentShard shard{{{&v, 0, v.value.numel(), 0, false}}, unit.exp_avg, unit.exp_avg_sq, false};
    optim::adamw_update(shard, options_.adam, lr, 1.0f, norm, unit.steps);
    if (K > 1) kernels::copy(modules_[K - 1].tied[u]->value, v.value);
  }
}

}  // namespace tessera::train
