#include "comm/staged_process_group.h"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

namespace tessera::comm {

namespace {

// Host buffers are whole multiples of this, so that sizes that differ a little (the last gradient
// bucket, a shorter micro-batch) reuse one buffer.
constexpr int64_t kGranuleBytes = 64 << 10;

class StagingPool {
 public:
  explicit StagingPool(std::shared_ptr<DeviceStaging> staging) : staging_(std::move(staging)) {
    TESSERA_CHECK(staging_ != nullptr, "make_staged_process_group: no DeviceStaging given");
  }

  DeviceStaging& staging() { return *staging_; }
  StagingStats& stats() { return stats_; }

  // A whole buffer of at least `numel` elements of `dtype`, held by the caller until give_back: the
  // smallest idle one that fits, else a new one that replaces the largest idle one of the dtype (grown).
  Tensor take(int64_t numel, DType dtype) {
    int best = -1, largest = -1;
    for (int i = 0; i < static_cast<int>(idle_.size()); ++i) {
      const Tensor& b = idle_[i];
      if (b.dtype() != dtype) continue;
      if (b.numel() >= numel && (best < 0 || b.numel() < idle_[best].numel())) best = i;
      if (largest < 0 || b.numel() > idle_[largest].numel()) largest = i;
    }
    if (best >= 0) return remove(best);
    if (largest >= 0) stats_.bytes_held -= static_cast<int64_t>(remove(largest).nbytes());
    const int64_t element = static_cast<int64_t>(dtype_size(dtype));
    const int64_t granules = (numel * element + kGranuleBytes - 1) / kGranuleBytes;
    Tensor b = staging_->host_buffer(std::max<int64_t>(1, granules) * kGranuleBytes / element, dtype);
    ++stats_.buffers_allocated;
    stats_.bytes_held += static_cast<int64_t>(b.nbytes());
    return b;
  }

  void give_back(Tensor buffer) { idle_.push_back(std::move(buffer)); }

  // A buffer an abandoned operation keeps (its wrapped operation may still write it): never back in the pool.
  void forget(const Tensor& buffer) { stats_.bytes_held -= static_cast<int64_t>(buffer.nbytes()); }

 private:
  Tensor remove(int i) {
    Tensor b = std::move(idle_[i]);
    idle_.erase(idle_.begin() + i);
    return b;
  }

  std::shared_ptr<DeviceStaging> staging_;
  std::vector<Tensor> idle_;
  StagingStats stats_;
};

// A device tensor and its host copy, which is copied back when the operation completes if it writes it.
struct Staged {
  Tensor device, host;
  bool copy_back;
};

// The wrapped operation's handle and what must outlive it: the host buffers, given back to the pool
// once it completes, after the copies back.
class StagedWork final : public Work {
 public:
  StagedWork(std::shared_ptr<StagingPool> pool, WorkHandle inner, std::vector<Staged> staged, std::vector<Tensor> held)
      : pool_(std::move(pool)), inner_(std::move(inner)), staged_(std::move(staged)), held_(std::move(held)) {}

  // Dropped without wait(): completed all the same (as the MPI group's handles), results copied back.
  // While an error unwinds the stack the wrapped handle keeps its host buffers alive (MPI may still
  // write them) and they never return to the pool.
  ~StagedWork() override {
    if (done_) return;
    if (std::uncaught_exceptions() > 0) {
      for (const Tensor& b : held_) pool_->forget(b);
      return;
    }
    try {
      wait();
    } catch (...) {
    }
  }

  void wait() override {
    if (done_) return;
    try {
      inner_->wait();
    } catch (...) {
      finish(/*completed=*/false);
      throw;
    }
    finish(/*completed=*/true);
  }

  bool test() override {
    if (done_) return true;
    bool complete = false;
    try {
      complete = inner_->test();
    } catch (...) {
      finish(/*completed=*/false);
      throw;
    }
    if (complete) finish(/*completed=*/true);
    return complete;
  }

 private:
  // Copies the results back (when the operation succeeded) and gives the buffers back, even when a
  // copy fails.
  void finish(bool completed) {
    done_ = true;
    std::exception_ptr failure;
    if (completed) {
      try {
        for (const Staged& s : staged_) {
          if (!s.copy_back) continue;
          pool_->staging().to_device(s.device, s.host);
          ++pool_->stats().copies_to_device;
        }
      } catch (...) {
        failure = std::current_exception();
      }
    }
    staged_.clear();
    for (Tensor& b : held_) pool_->give_back(std::move(b));
    held_.clear();
    if (failure) std::rethrow_exception(failure);
  }

  std::shared_ptr<StagingPool> pool_;
  WorkHandle inner_;
  std::vector<Staged> staged_;
  std::vector<Tensor> held_;
  bool done_ = false;
};

// The staging of one operation: its tensors' host stand-ins, then the wrapped group's handle. Buffers
// of an operation that fails to start (an argument the wrapped group refuses) go back to the pool.
class Operation {
 public:
  explicit Operation(std::shared_ptr<StagingPool> pool) : pool_(std::move(pool)) {}
  ~Operation() {
    for (Tensor& b : held_) pool_->give_back(std::move(b));
  }

  // t itself when it is on the host (or undefined: the wrapped group says what is wrong); else a host
  // copy of t's shape, holding t's values when the operation reads them (`copy_in`), and copied back
  // into t when it completes if the operation writes t (`copy_back`).
  Tensor stage(const Tensor& t, bool copy_in, bool copy_back) {
    if (!t.defined() || t.device().type == DeviceType::CPU) return t;
    Tensor whole = pool_->take(t.numel(), t.dtype());
    Tensor host = whole.flat_range(0, t.numel()).view(t.shape());
    held_.push_back(std::move(whole));
    if (copy_in) {
      pool_->staging().to_host(host, t);
      ++pool_->stats().copies_to_host;
    }
    if (copy_back) staged_.push_back({t, host, true});
    return host;
  }

  WorkHandle launched(WorkHandle inner) {
    return std::make_unique<StagedWork>(pool_, std::move(inner), std::move(staged_), std::exchange(held_, {}));
  }

 private:
  std::shared_ptr<StagingPool> pool_;
  std::vector<Staged> staged_;
  std::vector<Tensor> held_;
};

class StagedProcessGroup final : public ProcessGroup {
 public:
  StagedProcessGroup(std::unique_ptr<ProcessGroup> inner, std::shared_ptr<StagingPool> pool)
      : inner_(std::move(inner)), pool_(std::move(pool)) {
    TESSERA_CHECK(inner_ != nullptr, "make_staged_process_group: no group to wrap");
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::vector<int>& world_ranks() const override { return inner_->world_ranks(); }
  const std::string& name() const override { return inner_->name(); }

  WorkHandle all_reduce_async(const Tensor& t, ReduceOp op) override {
    Operation o(pool_);
    Tensor h = o.stage(t, true, true);
    return o.launched(inner_->all_reduce_async(h, op));
  }

  WorkHandle all_gather_async(const Tensor& in, const Tensor& out) override {
    Operation o(pool_);
    Tensor hin = o.stage(in, true, false);
    Tensor hout = o.stage(out, false, true);
    return o.launched(inner_->all_gather_async(hin, hout));
  }

  WorkHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override {
    Operation o(pool_);
    Tensor hin = o.stage(in, true, false);
    Tensor hout = o.stage(out, false, true);
    return o.launched(inner_->reduce_scatter_async(hin, hout, op));
  }

  // The root only sends its values; the others only receive.
  WorkHandle broadcast_async(const Tensor& t, int root) override {
    Operation o(pool_);
    Tensor h = o.stage(t, rank() == root, rank() != root);
    return o.launched(inner_->broadcast_async(h, root));
  }

  WorkHandle all_to_all_async(const Tensor& in, const Tensor& out) override {
    Operation o(pool_);
    Tensor hin = o.stage(in, true, false);
    Tensor hout = o.stage(out, false, true);
    return o.launched(inner_->all_to_all_async(hin, hout));
  }

  WorkHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                                const std::vector<int64_t>& recv_counts) override {
    Operation o(pool_);
    Tensor hin = o.stage(in, true, false);
    Tensor hout = o.stage(out, false, true);
    return o.launched(inner_->all_to_all_v_async(hin, send_counts, hout, recv_counts));
  }

  WorkHandle send_async(const Tensor& t, int dst, int tag) override {
    Operation o(pool_);
    Tensor h = o.stage(t, true, false);
    return o.launched(inner_->send_async(h, dst, tag));
  }

  WorkHandle recv_async(const Tensor& t, int src, int tag) override {
    Operation o(pool_);
    Tensor h = o.stage(t, false, true);
    return o.launched(inner_->recv_async(h, src, tag));
  }

  void barrier() override { inner_->barrier(); }

  std::unique_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
    std::unique_ptr<ProcessGroup> part = inner_->split(color, key, name);
    if (!part) return nullptr;
    return std::make_unique<StagedProcessGroup>(std::move(part), pool_);
  }

  const StagingStats& stats() const { return pool_->stats(); }

 private:
  std::unique_ptr<ProcessGroup> inner_;
  std::shared_ptr<StagingPool> pool_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_staged_process_group(std::unique_ptr<ProcessGroup> inner,
                                                        std::shared_ptr<DeviceStaging> staging) {
  return std::make_unique<StagedProcessGroup>(std::move(inner), std::make_shared<StagingPool>(std::move(staging)));
}

StagingStats staging_stats(const ProcessGroup& staged_group) {
  const auto* g = dynamic_cast<const StagedProcessGroup*>(&staged_group);
  TESSERA_CHECK(g != nullptr, "staging_stats: group ", staged_group.name(), " is not a staged process group");
  return g->stats();
}

}  // namespace tessera::comm
