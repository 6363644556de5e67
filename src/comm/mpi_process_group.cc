#include "comm/mpi_process_group.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "comm/collective_checks.h"

namespace tessera::comm {

namespace {

std::atomic<int64_t> g_timeout_seconds{0};

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return str_cat("MPI error code ", code);
  return std::string(text, length);
}

// The dtype was checked by detail::check_tensor, so every case here is supported.
MPI_Datatype mpi_type(DType dt) {
  switch (dt) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    default: break;
  }
  throw Error(str_cat("no MPI datatype for ", dtype_name(dt)));
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }

int count(const Tensor& t) { return static_cast<int>(t.numel()); }  // <= INT_MAX, checked

// An MPI request and what must outlive it: the tensors whose storage MPI reads or writes, and for
// all_to_all_v the count and displacement arrays (MPI may read them until completion).
class MpiWork : public Work {
 public:
  MpiWork(const char* op, const std::string& group, int64_t bytes, uint64_t seq, std::vector<Tensor> buffers)
      : op_(op), group_(group), bytes_(bytes), seq_(seq), buffers_(std::move(buffers)) {
    log_id_ = global_collective_log().record(op, group, bytes, seq);
  }

  // A handle dropped without wait() is still waited for: MPI may be writing into its buffers. Except while
  // an error unwinds the stack: the error is on its way to ending the job (comm::abort_all), and waiting
  // here could block for ever on a peer that is itself waiting for this rank (a pipeline receive whose
  // sender failed). The buffers are then kept alive, never freed, since MPI may still write them.
  ~MpiWork() override {
    if (done_) return;
    if (std::uncaught_exceptions() > 0) {
      static auto* abandoned = new std::vector<std::pair<std::vector<Tensor>, std::vector<int>>>;
      abandoned->emplace_back(std::move(buffers_), std::move(arrays_));
      return;
    }
    try {
      wait();
    } catch (...) {
    }
  }

  const char* op() const { return op_; }
  MPI_Request* request() { return &request_; }
  std::vector<int>& arrays() { return arrays_; }
  // For recv: the message must fill the buffer exactly; a shorter one is a protocol bug.
  void expect_count(int elements, MPI_Datatype type, int src) {
    expected_count_ = elements;
    type_ = type;
    src_ = src;
  }
  // The operation could not be started: there is nothing to wait for.
  void abandon() {
    done_ = true;
    global_collective_log().mark_done(log_id_);
  }

  void wait() override {
    if (done_) return;
    MPI_Status status;
    finish(complete(&status), status);
  }

  bool test() override {
    if (done_) return true;
    MPI_Status status;
    int flag = 0;
    int rc = MPI_Test(&request_, &flag, &status);
    if (rc == MPI_SUCCESS && !flag) return false;
    finish(rc, status);
    return true;
  }

 private:
  // Releases the buffers and reports a failure or a short message.
  void finish(int rc, MPI_Status& status) {
    done_ = true;
    global_collective_log().mark_done(log_id_);
    buffers_.clear();
    TESSERA_CHECK(rc == MPI_SUCCESS, op_, " on group ", group_, " (#", seq_, ") failed: ", mpi_error_string(rc));
    if (expected_count_ >= 0) {
      int received = 0;
      MPI_Get_count(&status, type_, &received);
      TESSERA_CHECK(received == expected_count_, op_, " on group ", group_, ": received ", received,
                    " elements from rank ", src_, ", expected ", expected_count_);
    }
  }

  // MPI_Wait, or with a timeout set, MPI_Test in a loop that ends the job when the time is up.
  int complete(MPI_Status* status) {
    const std::chrono::seconds timeout = collective_timeout();
    if (timeout.count() == 0) return MPI_Wait(&request_, status);
    // Spin (MPI_Test yields the core when Open MPI is told to) for a couple of milliseconds before
    // sleeping: the nonblocking collectives progress only while a rank polls, so sleeping early stalls
    // the peers too (bench/collectives.cc measured 1.4-3.5x on 0.1-few ms collectives).
    constexpr std::chrono::microseconds kSpinTime(2000);
    constexpr std::chrono::microseconds kMaxPause(200);
    const auto start = std::chrono::steady_clock::now();
    std::chrono::microseconds pause(50);
    for (;;) {
      int flag = 0;
      int rc = MPI_Test(&request_, &flag, status);
      if (rc != MPI_SUCCESS || flag) return rc;
      // Longer waits sleep, so that ranks sharing cores (oversubscribed tests) leave the CPU to the
      // peers they are waiting for.
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited < kSpinTime) continue;
      if (waited >= timeout) report_hang(timeout);
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, kMaxPause);
    }
  }

  [[noreturn]] void report_hang(std::chrono::seconds timeout) {
    std::string message = str_cat("rank ", MpiRuntime::world_rank(), ": collective ", op_, " on group ", group_,
                                  " (", bytes_, " bytes, #", seq_, ") did not complete within ", timeout.count(),
                                  " s; recent collectives:\n", recent_collectives(), "\n");
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; this is for the compiler
  }

  const char* op_;
  std::string group_;
  int64_t bytes_;
  uint64_t seq_;
  uint64_t log_id_ = 0;
  std::vector<Tensor> buffers_;
  std::vector<int> arrays_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
  int expected_count_ = -1;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  int src_ = -1;
};

class MpiProcessGroup : public ProcessGroup {
 public:
  // Takes ownership of comm.
  MpiProcessGroup(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
    // Errors become exceptions that name the operation, instead of MPI aborting without context.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Group group, world;
    MPI_Comm_group(comm_, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> ranks(size_);
    for (int i = 0; i < size_; ++i) ranks[i] = i;
    world_ranks_.resize(size_);
    MPI_Group_translate_ranks(group, size_, ranks.data(), world, world_ranks_.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
    if (found) tag_ub_ = *tag_ub;
  }

  ~MpiProcessGroup() override {
    // Groups held in statics outlive MPI_Finalize; freeing then is an error.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  const std::string& name() const override { return name_; }

  WorkHandle all_reduce_async(const Tensor& t, ReduceOp op) override {
    detail::check_tensor(*this, "all_reduce", "t", t);
    auto work = start("all_reduce", t.nbytes(), {t});
    int rc = MPI_Iallreduce(MPI_IN_PLACE, t.host_raw(), count(t), mpi_type(t.dtype()), mpi_op(op), comm_,
                            work->request());
    return launched(std::move(work), rc);
  }

  WorkHandle all_gather_async(const Tensor& in, const Tensor& out) override {
    check_pair("all_gather", in, out);
    if (out.numel() != size_ * in.numel())
      detail::check_numel(*this, "all_gather", "out", out, size_ * in.numel(),
                          str_cat("size() * in.numel() = ", size_, " * ", in.numel()));
    // `in` may already sit in this rank's chunk of `out` (sequence-parallel buffers often do).
    const char* own_chunk = static_cast<const char*>(out.host_raw()) + rank_ * in.nbytes();
    const void* send = in.host_raw() == own_chunk ? MPI_IN_PLACE : in.host_raw();
    MPI_Datatype type = mpi_type(in.dtype());
    auto work = start("all_gather", in.nbytes(), {in, out});
    int rc = MPI_Iallgather(send, count(in), type, out.host_raw(), count(in), type, comm_, work->request());
    return launched(std::move(work), rc);
  }

  WorkHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override {
    check_pair("reduce_scatter", in, out);
    if (in.numel() != size_ * out.numel())
      detail::check_numel(*this, "reduce_scatter", "in", in, size_ * out.numel(),
                          str_cat("size() * out.numel() = ", size_, " * ", out.numel()));
    auto work = start("reduce_scatter", in.nbytes(), {in, out});
    int rc = MPI_Ireduce_scatter_block(in.host_raw(), out.host_raw(), count(out), mpi_type(in.dtype()), mpi_op(op), comm_,
                                       work->request());
    return launched(std::move(work), rc);
  }

  WorkHandle broadcast_async(const Tensor& t, int root) override {
    detail::check_tensor(*this, "broadcast", "t", t);
    detail::check_peer(*this, "broadcast", "root", root, /*allow_self=*/true);
    auto work = start("broadcast", t.nbytes(), {t});
    int rc = MPI_Ibcast(t.host_raw(), count(t), mpi_type(t.dtype()), root, comm_, work->request());
    return launched(std::move(work), rc);
  }

  WorkHandle all_to_all_async(const Tensor& in, const Tensor& out) override {
    check_pair("all_to_all", in, out);
    TESSERA_CHECK(in.numel() % size_ == 0, "all_to_all on group ", name_, ": in has ", in.numel(),
                  " elements, not a multiple of the group size ", size_);
    detail::check_numel(*this, "all_to_all", "out", out, in.numel(), "in.numel()");
    int chunk = count(in) / size_;
    MPI_Datatype type = mpi_type(in.dtype());
    auto work = start("all_to_all", in.nbytes(), {in, out});
    int rc = MPI_Ialltoall(in.host_raw(), chunk, type, out.host_raw(), chunk, type, comm_, work->request());
    return launched(std::move(work), rc);
  }

  WorkHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                                const std::vector<int64_t>& recv_counts) override {
    const char* op = "all_to_all_v";
    check_pair(op, in, out);
    detail::check_counts(*this, op, "send_counts", in, send_counts);
    detail::check_counts(*this, op, "recv_counts", out, recv_counts);
    auto work = start(op, in.nbytes(), {in, out});
    // Counts and displacements, back to back; every value fits an int because the totals do.
    std::vector<int>& a = work->arrays();
    a.resize(4 * size_);
    int* send_n = a.data();
    int* send_at = send_n + size_;
    int* recv_n = send_at + size_;
    int* recv_at = recv_n + size_;
    for (int i = 0, s = 0, r = 0; i < size_; ++i) {
      send_n[i] = static_cast<int>(send_counts[i]);
      recv_n[i] = static_cast<int>(recv_counts[i]);
      send_at[i] = s;
      recv_at[i] = r;
      s += send_n[i];
      r += recv_n[i];
    }
    MPI_Datatype type = mpi_type(in.dtype());
    int rc = MPI_Ialltoallv(in.host_raw(), send_n, send_at, type, out.host_raw(), recv_n, recv_at, type, comm_,
                            work->request());
    return launched(std::move(work), rc);
  }

  WorkHandle send_async(const Tensor& t, int dst, int tag) override {
    detail::check_tensor(*this, "send", "t", t);
    detail::check_peer(*this, "send", "dst", dst, /*allow_self=*/false);
    check_tag("send", tag);
    auto work = start("send", t.nbytes(), {t});
    int rc = MPI_Isend(t.host_raw(), count(t), mpi_type(t.dtype()), dst, tag, comm_, work->request());
    return launched(std::move(work), rc);
  }

  WorkHandle recv_async(const Tensor& t, int src, int tag) override {
    detail::check_tensor(*this, "recv", "t", t);
    detail::check_peer(*this, "recv", "src", src, /*allow_self=*/false);
    check_tag("recv", tag);
    auto work = start("recv", t.nbytes(), {t});
    work->expect_count(count(t), mpi_type(t.dtype()), src);
    int rc = MPI_Irecv(t.host_raw(), count(t), mpi_type(t.dtype()), src, tag, comm_, work->request());
    return launched(std::move(work), rc);
  }

  // Non-blocking underneath, so that a barrier nobody else reaches is caught by the timeout too.
  void barrier() override {
    auto work = start("barrier", 0, {});
    int rc = MPI_Ibarrier(comm_, work->request());
    launched(std::move(work), rc)->wait();
  }

  std::unique_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
    MPI_Comm comm = MPI_COMM_NULL;
    int rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &comm);
    TESSERA_CHECK(rc == MPI_SUCCESS, "split of group ", name_, " into ", name, " failed: ", mpi_error_string(rc));
    if (comm == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiProcessGroup>(comm, name);
  }

 private:
  void check_pair(const char* op, const Tensor& in, const Tensor& out) {
    detail::check_tensor(*this, op, "in", in);
    detail::check_tensor(*this, op, "out", out);
    detail::check_same_dtype(*this, op, in, out);
  }

  void check_tag(const char* op, int tag) {
    TESSERA_CHECK(tag >= 0 && tag <= tag_ub_, op, " on group ", name_, ": tag ", tag, " is outside [0, ", tag_ub_,
                  "]");
  }

  std::unique_ptr<MpiWork> start(const char* op, size_t bytes, std::vector<Tensor> buffers) {
    return std::make_unique<MpiWork>(op, name_, static_cast<int64_t>(bytes), ++seq_, std::move(buffers));
  }

  WorkHandle launched(std::unique_ptr<MpiWork> work, int rc) {
    if (rc != MPI_SUCCESS) {
      work->abandon();
      throw Error(str_cat(work->op(), " on group ", name_, " failed to start: ", mpi_error_string(rc)));
    }
    return work;
  }

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  int tag_ub_ = 32767;  // the least MPI guarantees
  uint64_t seq_ = 0;
};

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    TESSERA_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS,
                  "MPI_Init_thread failed");
    owns_ = true;
  }
  if (provided < MPI_THREAD_FUNNELED) {
    if (owns_) MPI_Finalize();
    owns_ = false;
    throw Error("MPI does not provide MPI_THREAD_FUNNELED, which OpenMP kernels beside MPI calls need");
  }
}

MpiRuntime::~MpiRuntime() {
  if (owns_ && active()) MPI_Finalize();
}

bool MpiRuntime::active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int MpiRuntime::world_rank() {
  if (!active()) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

std::unique_ptr<ProcessGroup> make_mpi_world_group() {
  TESSERA_CHECK(MpiRuntime::active(), "make_mpi_world_group: MPI is not initialised (create an MpiRuntime first)");
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  TESSERA_CHECK(rc == MPI_SUCCESS, "MPI_Comm_dup of MPI_COMM_WORLD failed: ", mpi_error_string(rc));
  return std::make_unique<MpiProcessGroup>(comm, "world");
}

void set_collective_timeout(std::chrono::seconds timeout) {
  g_timeout_seconds.store(std::max<int64_t>(0, timeout.count()));
}

std::chrono::seconds collective_timeout() { return std::chrono::seconds(g_timeout_seconds.load()); }

void abort_all(const std::string& reason) {
  std::string message = str_cat("rank ", MpiRuntime::world_rank(), ": ", reason, "\n");
  std::fputs(message.c_str(), stderr);
  std::fflush(stderr);
  if (MpiRuntime::active()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

}  // namespace tessera::comm
