#include "comm/process_group.h"

#include <climits>
#include <cstring>

#include "comm/collective_checks.h"

namespace tessera::comm {

namespace detail {

static std::string where(const ProcessGroup& g, const char* op) {
  return str_cat(op, " on group ", g.name());
}

void check_tensor(const ProcessGroup& g, const char* op, const char* which, const Tensor& t) {
  TESSERA_CHECK(t.defined(), where(g, op), ": ", which, " is an undefined tensor");
  TESSERA_CHECK(t.device().type == DeviceType::CPU, where(g, op), ": ", which, " is on ", t.device().str(),
                "; this process group works on cpu tensors");
  DType dt = t.dtype();
  TESSERA_CHECK(dt == DType::F32 || dt == DType::I32 || dt == DType::I64, where(g, op), ": ", which,
                " has dtype ", dtype_name(dt), "; supported are fp32, int32 and int64");
  // MPI counts are ints; even the all_gather output (size() * numel) must fit.
  TESSERA_CHECK(t.numel() <= INT_MAX, where(g, op), ": ", which, " has ", t.numel(),
                " elements, more than the ", INT_MAX, " one MPI call can move");
}

void check_same_dtype(const ProcessGroup& g, const char* op, const Tensor& in, const Tensor& out) {
  TESSERA_CHECK(in.dtype() == out.dtype(), where(g, op), ": in has dtype ", dtype_name(in.dtype()),
                " but out has dtype ", dtype_name(out.dtype()));
}

void check_numel(const ProcessGroup& g, const char* op, const char* which, const Tensor& t, int64_t expected,
                 const std::string& rule) {
  TESSERA_CHECK(t.numel() == expected, where(g, op), ": ", which, " has ", t.numel(), " elements, expected ",
                rule, " = ", expected);
}

void check_peer(const ProcessGroup& g, const char* op, const char* role, int peer, bool allow_self) {
  TESSERA_CHECK(peer >= 0 && peer < g.size(), where(g, op), ": ", role, " ", peer,
                " is not a rank of the group (size ", g.size(), ")");
  TESSERA_CHECK(allow_self || peer != g.rank(), where(g, op), ": ", role, " ", peer,
                " is this rank; a process cannot send to or receive from itself");
}

void check_counts(const ProcessGroup& g, const char* op, const char* which, const Tensor& t,
                  const std::vector<int64_t>& counts) {
  TESSERA_CHECK(static_cast<int>(counts.size()) == g.size(), where(g, op), ": ", which, " has ", counts.size(),
                " entries, expected one per rank = ", g.size());
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    TESSERA_CHECK(counts[i] >= 0, where(g, op), ": ", which, "[", i, "] is negative (", counts[i], ")");
    total += counts[i];
  }
  TESSERA_CHECK(total == t.numel(), where(g, op), ": ", which, " sum to ", total, " elements but the tensor has ",
                t.numel());
}

}  // namespace detail

namespace {

// Work that is complete when it is returned.
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

WorkHandle completed() { return std::make_unique<CompletedWork>(); }

void copy_elements(const Tensor& from, const Tensor& to) {
  std::memmove(to.host_raw(), from.host_raw(), from.nbytes());  // memmove: in and out may alias
}

class SingleProcessGroup : public ProcessGroup {
 public:
  explicit SingleProcessGroup(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  const std::string& name() const override { return name_; }

  WorkHandle all_reduce_async(const Tensor& t, ReduceOp) override {
    detail::check_tensor(*this, "all_reduce", "t", t);
    return completed();
  }

  WorkHandle all_gather_async(const Tensor& in, const Tensor& out) override {
    check_pair("all_gather", in, out);
    if (out.numel() != in.numel())
      detail::check_numel(*this, "all_gather", "out", out, in.numel(), str_cat("size() * in.numel() = 1 * ", in.numel()));
    copy_elements(in, out);
    return completed();
  }

  WorkHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp) override {
    check_pair("reduce_scatter", in, out);
    if (in.numel() != out.numel())
      detail::check_numel(*this, "reduce_scatter", "in", in, out.numel(),
                          str_cat("size() * out.numel() = 1 * ", out.numel()));
    copy_elements(in, out);
    return completed();
  }

  WorkHandle broadcast_async(const Tensor& t, int root) override {
    detail::check_tensor(*this, "broadcast", "t", t);
    detail::check_peer(*this, "broadcast", "root", root, /*allow_self=*/true);
    return completed();
  }

  WorkHandle all_to_all_async(const Tensor& in, const Tensor& out) override {
    check_pair("all_to_all", in, out);
    detail::check_numel(*this, "all_to_all", "out", out, in.numel(), "in.numel()");
    copy_elements(in, out);
    return completed();
  }

  WorkHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                                const std::vector<int64_t>& recv_counts) override {
    const char* op = "all_to_all_v";
    detail::check_tensor(*this, op, "in", in);
    detail::check_tensor(*this, op, "out", out);
    detail::check_same_dtype(*this, op, in, out);
    detail::check_counts(*this, op, "send_counts", in, send_counts);
    detail::check_counts(*this, op, "recv_counts", out, recv_counts);
    copy_elements(in, out);
    return completed();
  }

  WorkHandle send_async(const Tensor& t, int dst, int tag) override {
    detail::check_peer(*this, "send", "dst", dst, /*allow_self=*/false);
    return nullptr;  // not reached
  }

  WorkHandle recv_async(const Tensor& t, int src, int tag) override {
    detail::check_peer(*this, "recv", "src", src, /*allow_self=*/false);
    return nullptr;  // not reached
  }

  void barrier() override {}

  std::unique_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
    if (color < 0) return nullptr;
    return std::make_unique<SingleProcessGroup>(name);
  }

 private:
  void check_pair(const char* op, const Tensor& in, const Tensor& out) {
    detail::check_tensor(*this, op, "in", in);
    detail::check_tensor(*this, op, "out", out);
    detail::check_same_dtype(*this, op, in, out);
  }

  std::string name_;
  std::vector<int> world_ranks_{0};
};

}  // namespace

std::unique_ptr<ProcessGroup> make_single_process_group(const std::string& name) {
  return std::make_unique<SingleProcessGroup>(name);
}

}  // namespace tessera::comm
