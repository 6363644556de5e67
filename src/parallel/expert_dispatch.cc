#include "parallel/expert_dispatch.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "kernels/tensor_ops.h"

namespace tessera::parallel {
namespace {

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

// Every member's `values` (the same length on each), member-major.
std::vector<int64_t> all_gather_counts(comm::ProcessGroup& group, const std::vector<int64_t>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (group.size() == 1) return values;
  // Written and read on the host, exchanged on the default device (a GPU run's: an NCCL group takes
  // only its GPU's memory; a staged one either).
  Tensor host = Tensor::empty({n}, DType::I64, Device::cpu());
  std::copy(values.begin(), values.end(), host.host_i64());
  const Tensor in = kernels::to_device(host, default_device());
  Tensor out = Tensor::empty({n * group.size()}, DType::I64);
  group.all_gather(in, out);
  const Tensor all = kernels::to_device(out, Device::cpu());
  return std::vector<int64_t>(all.host_i64(), all.host_i64() + all.numel());
}

// Each member's rows (member i has rows[i] of them), back to back in member order. Padded to the
// longest so that the library's all-gather does it.
Tensor all_gather_rows(comm::ProcessGroup& group, const Tensor& mine, const std::vector<int64_t>& rows) {
  if (group.size() == 1) return mine;
  const int64_t h = mine.dim(1), most = *std::max_element(rows.begin(), rows.end());
  Tensor padded = Tensor::zeros({most, h});
  if (mine.dim(0) > 0) padded.narrow(0, mine.dim(0)).copy_from(mine);
  Tensor gathered = Tensor::empty({most * group.size(), h});
  group.all_gather(padded, gathered);
  Tensor out = Tensor::empty({sum(rows), h});
  for (int i = 0, at = 0; i < group.size(); at += static_cast<int>(rows[i]), ++i)
    if (rows[i] > 0) out.narrow(at, rows[i]).copy_from(gathered.narrow(i * most, rows[i]));
  return out;
}

// The adjoint of all_gather_rows: member i's block of `all` summed over the members, for this member.
Tensor reduce_scatter_rows_v(comm::ProcessGroup& group, const Tensor& all, const std::vector<int64_t>& rows) {
  if (group.size() == 1) return all;
  const int64_t h = all.dim(1), most = *std::max_element(rows.begin(), rows.end());
  Tensor padded = Tensor::zeros({most * group.size(), h});
  for (int i = 0, at = 0; i < group.size(); at += static_cast<int>(rows[i]), ++i)
    if (rows[i] > 0) padded.narrow(i * most, rows[i]).copy_from(all.narrow(at, rows[i]));
  Tensor reduced = Tensor::empty({most, h});
  group.reduce_scatter(padded, reduced);
  return reduced.narrow(0, rows[group.rank()]).clone();
}

Tensor all_to_all_rows(comm::ProcessGroup& group, const Tensor& in, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows) {
  if (group.size() == 1) return in;
  const int64_t h = in.dim(1);
  std::vector<int64_t> send(send_rows), recv(recv_rows);
  for (int64_t& n : send) n *= h;
  for (int64_t& n : recv) n *= h;
  Tensor out = Tensor::empty({sum(recv_rows), h});
  group.all_to_all_v_async(in, send, out, recv)->wait();
  return out;
}

// Chunk i of `in` (chunk_rows[i] rows) moved to position order[i] of the result (inverse: the reverse).
Tensor regroup(const Tensor& in, const std::vector<int64_t>& chunk_rows, const std::vector<int64_t>& order,
               bool inverse) {
  const size_t n = chunk_rows.size();
  std::vector<int64_t> target_rows(n), src_at(n), dst_at(n);
  for (size_t i = 0; i < n; ++i) target_rows[order[i]] = chunk_rows[i];
  for (size_t i = 0, at = 0; i < n; at += chunk_rows[i], ++i) src_at[i] = static_cast<int64_t>(at);
  std::vector<int64_t> target_at(n);
  for (size_t i = 0, at = 0; i < n; at += target_rows[i], ++i) target_at[i] = static_cast<int64_t>(at);
  for (size_t i = 0; i < n; ++i) dst_at[i] = target_at[order[i]];
  Tensor out = Tensor::empty(in.shape());
  for (size_t i = 0; i < n; ++i) {
    if (chunk_rows[i] == 0) continue;
    if (inverse)
      out.narrow(src_at[i], chunk_rows[i]).copy_from(in.narrow(dst_at[i], chunk_rows[i]));
    else
      out.narrow(dst_at[i], chunk_rows[i]).copy_from(in.narrow(src_at[i], chunk_rows[i]));
  }
  return out;
}

}  // namespace

const ExpertParallelContext& ExpertParallelContext::single_process() {
  static std::unique_ptr<comm::ProcessGroup> ep = comm::make_single_process_group("expert-model");
  static std::unique_ptr<comm::ProcessGroup> etp = comm::make_single_process_group("expert-tensor");
  static std::unique_ptr<comm::ProcessGroup> both = comm::make_single_process_group("expert-tensor-model");
  static ExpertParallelContext ctx{ep.get(), etp.get(), both.get()};
  return ctx;
}

ExpertDispatch::ExpertDispatch(const ExpertParallelContext& ep, const std::vector<int64_t>& counts) : ep_(ep) {
  const int64_t experts = static_cast<int64_t>(counts.size()), P = ep.ep_size(), p = ep.ep_rank();
  TESSERA_CHECK(experts % P == 0, "ExpertDispatch: ", experts, " experts do not split over ", P,
                " expert-parallel ranks");
  const int64_t local = experts / P;
  first_local_ = p * local;
  total_rows_ = sum(counts);
  local_rows_.assign(static_cast<size_t>(local), 0);
  chunk_rows_.clear();
  chunk_order_.clear();
  if (ep.dispatcher == TokenDispatcher::AllGather) {
    // Every member's counts; its chunks [member][expert], of which the local experts' are kept and put
    // in [expert][member] order at the front.
    comm::ProcessGroup& group = *ep.expert_tensor_model;
    const std::vector<int64_t> all = all_gather_counts(group, counts);
    const int64_t members = group.size();
    gathered_rows_.assign(static_cast<size_t>(members), 0);
    for (int64_t m = 0; m < members; ++m)
      for (int64_t e = 0; e < experts; ++e) gathered_rows_[m] += all[m * experts + e];
    // Kept chunks first (in [expert][member] order), then the others in their order.
    std::vector<int64_t> kept_position(static_cast<size_t>(members * experts), -1);
    int64_t next = 0;
    for (int64_t j = 0; j < local; ++j)
      for (int64_t m = 0; m < members; ++m) kept_position[m * experts + first_local_ + j] = next++;
    for (int64_t m = 0; m < members; ++m)
      for (int64_t e = 0; e < experts; ++e) {
        const int64_t rows = all[m * experts + e];
        chunk_rows_.push_back(rows);
        const bool kept = e >= first_local_ && e < first_local_ + local;
        chunk_order_.push_back(kept ? kept_position[m * experts + e] : next++);
        if (kept) local_rows_[e - first_local_] += rows;
      }
    return;
  }
  // alltoall. Every ep rank's counts: what this rank receives from each, for each local expert.
  const std::vector<int64_t> all = all_gather_counts(*ep.expert_model, counts);
  send_rows_.assign(static_cast<size_t>(P), 0);
  recv_rows_.assign(static_cast<size_t>(P), 0);
  std::vector<int64_t> received;  // [ep source][local expert]
  for (int64_t r = 0; r < P; ++r) {
    for (int64_t j = 0; j < local; ++j) {
      send_rows_[r] += counts[r * local + j];
      received.push_back(all[r * experts + first_local_ + j]);
      recv_rows_[r] += received.back();
    }
  }
  // The etp ranks' received chunks: [etp][ep source][local expert] -> [local expert][etp][ep source].
  comm::ProcessGroup& etp = *ep.expert_tensor;
  const int64_t Q = etp.size();
  const std::vector<int64_t> chunks = all_gather_counts(etp, received);
  gathered_rows_.assign(static_cast<size_t>(Q), 0);
  for (int64_t q = 0; q < Q; ++q)
    for (int64_t r = 0; r < P; ++r)
      for (int64_t j = 0; j < local; ++j) {
        const int64_t rows = chunks[(q * P + r) * local + j];
        chunk_rows_.push_back(rows);
        chunk_order_.push_back((j * Q + q) * P + r);
        gathered_rows_[q] += rows;
        local_rows_[j] += rows;
      }
}

Tensor ExpertDispatch::dispatch(const Tensor& rows) const {
  TESSERA_CHECK(rows.dim(0) == total_rows_, "ExpertDispatch: ", rows.dim(0), " rows, planned for ", total_rows_);
  if (ep_.dispatcher == TokenDispatcher::AllGather) {
    Tensor all = all_gather_rows(*ep_.expert_tensor_model, rows, gathered_rows_);
    Tensor ordered = regroup(all, chunk_rows_, chunk_order_, false);
    return ordered.narrow(0, sum(local_rows_)).clone();
  }
  Tensor received = all_to_all_rows(*ep_.expert_model, rows, send_rows_, recv_rows_);
  Tensor gathered = all_gather_rows(*ep_.expert_tensor, received, gathered_rows_);
  return regroup(gathered, chunk_rows_, chunk_order_, false);
}

Tensor ExpertDispatch::combine(const Tensor& expert_rows) const {
  const int64_t h = expert_rows.dim(1);
  TESSERA_CHECK(expert_rows.dim(0) == sum(local_rows_), "ExpertDispatch: ", expert_rows.dim(0),
                " expert rows, planned for ", sum(local_rows_));
  if (ep_.dispatcher == TokenDispatcher::AllGather) {
    // The other experts' chunks are zero here: their owners add theirs in the reduction.
    Tensor ordered = Tensor::zeros({sum(chunk_rows_), h});
    if (expert_rows.dim(0) > 0) ordered.narrow(0, expert_rows.dim(0)).copy_from(expert_rows);
    Tensor all = regroup(ordered, chunk_rows_, chunk_order_, true);
    return reduce_scatter_rows_v(*ep_.expert_tensor_model, all, gathered_rows_);
  }
  Tensor gathered = regroup(expert_rows, chunk_rows_, chunk_order_, true);
  Tensor received = reduce_scatter_rows_v(*ep_.expert_tensor, gathered, gathered_rows_);
  return all_to_all_rows(*ep_.expert_model, received, recv_rows_, send_rows_);
}

}  // namespace tessera::parallel
