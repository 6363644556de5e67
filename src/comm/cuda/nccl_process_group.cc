#include "comm/cuda/nccl_process_group.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <thread>
#include <type_traits>
#include <vector>

#include "comm/collective_checks.h"
#include "comm/collective_log.h"
#include "comm/mpi_process_group.h"
#include "kernels/cuda/cuda_runtime.h"

// NCCL's header gives the types and the signatures the loaded symbols are cast to; nothing is linked.
#if __has_include(<nccl.h>)
#include <nccl.h>
#define TESSERA_HAVE_NCCL_H 1
#endif

namespace tessera::comm::cuda {

#if defined(TESSERA_HAVE_NCCL_H)

namespace {

// The NCCL entry points, from the library loaded at run time.
struct NcclApi {
  explicit NcclApi(const NcclLibrary& lib) : library(lib.path) {
    auto load = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(lib.symbol(name)); };
    load(get_unique_id, "ncclGetUniqueId");
    load(comm_init_rank, "ncclCommInitRank");
    load(comm_destroy, "ncclCommDestroy");
    load(comm_abort, "ncclCommAbort");
    load(comm_get_async_error, "ncclCommGetAsyncError");
    load(get_error_string, "ncclGetErrorString");
    load(get_last_error, "ncclGetLastError");
    load(all_reduce, "ncclAllReduce");
    load(reduce_scatter, "ncclReduceScatter");
    load(all_gather, "ncclAllGather");
    load(broadcast, "ncclBroadcast");
    load(send, "ncclSend");
    load(recv, "ncclRecv");
    load(group_start, "ncclGroupStart");
    load(group_end, "ncclGroupEnd");
  }
  std::string library;
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) comm_init_rank;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclCommAbort) comm_abort;
  decltype(&ncclCommGetAsyncError) comm_get_async_error;
  decltype(&ncclGetErrorString) get_error_string;
  decltype(&ncclGetLastError) get_last_error;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclReduceScatter) reduce_scatter;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclSend) send;
  decltype(&ncclRecv) recv;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
};

void check_cuda(cudaError_t status, const char* what) {
  TESSERA_CHECK(status == cudaSuccess, what, ": ", cudaGetErrorName(status), ": ", cudaGetErrorString(status));
}

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::F32: return ncclFloat32;
    case DType::I32: return ncclInt32;
    default: return ncclInt64;  // the only other dtype check_device_tensor lets through
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Max ? ncclMax : ncclSum; }

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw()); }

// What every operation of one communicator shares; operations keep it alive until they are done.
struct Communicator {
  std::shared_ptr<const NcclApi> api;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int ordinal = 0;
  std::string group;

  ~Communicator() {
    if (comm) api->comm_destroy(comm);
    if (stream) cudaStreamDestroy(stream);
  }

  // NCCL's message and its last error for this communicator.
  std::string message(ncclResult_t r) const {
    const char* last = api->get_last_error(comm);
    return str_cat(api->get_error_string(r), last && *last ? str_cat(" (", last, ")") : "");
  }

  // An NCCL failure leaves the communicator unusable and peers possibly blocked in it: every rank ends.
  [[noreturn]] void fail(const std::string& what) {
    if (comm) api->comm_abort(comm);
    comm = nullptr;
    abort_all(str_cat("NCCL: ", what, " on group ", group, "; recent collectives:\n", recent_collectives()));
  }

  void check(ncclResult_t r, const char* call) {
    if (r != ncclSuccess) fail(str_cat(call, " failed: ", message(r)));
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Communicator> c, const char* op, cudaEvent_t done, uint64_t log_id, std::vector<Tensor> buffers)
      : c_(std::move(c)), op_(op), done_event_(done), log_id_(log_id), buffers_(std::move(buffers)) {}

  // Dropped without wait(): waited for all the same, except while an error unwinds the stack (the
  // buffers are then kept, never freed, since the GPU may still write them).
  ~NcclWork() override {
    if (done_) return;
    if (std::uncaught_exceptions() > 0) {
      static auto* abandoned = new std::vector<std::vector<Tensor>>;
      abandoned->push_back(std::move(buffers_));
      return;
    }
    try {
      wait();
    } catch (...) {
    }
  }

  void wait() override {
    const auto start = std::chrono::steady_clock::now();
    const std::chrono::seconds timeout = collective_timeout();
    std::chrono::microseconds pause(20);
    while (!test()) {
      if (timeout.count() > 0 && std::chrono::steady_clock::now() - start >= timeout)
        c_->fail(str_cat(op_, " did not complete within ", timeout.count(), " s"));
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }

  bool test() override {
    if (done_) return true;
    const cudaError_t status = cudaEventQuery(done_event_);
    if (status == cudaErrorNotReady) {
      // NCCL reports a failure of a running operation (a peer gone, a network error) only when asked.
      ncclResult_t async = ncclSuccess;
      c_->check(c_->api->comm_get_async_error(c_->comm, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess && async != ncclInProgress) c_->fail(str_cat(op_, " failed: ", c_->message(async)));
      return false;
    }
    done_ = true;
    global_collective_log().mark_done(log_id_);
    cudaEventDestroy(done_event_);
    buffers_.clear();
    check_cuda(status, str_cat(op_, " on group ", c_->group, ": the communication stream").c_str());
    return true;
  }

 private:
  std::shared_ptr<Communicator> c_;
  const char* op_;
  cudaEvent_t done_event_;
  uint64_t log_id_;
  std::vector<Tensor> buffers_;
  bool done_ = false;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(std::unique_ptr<ProcessGroup> bootstrap, int ordinal, std::shared_ptr<const NcclApi> api)
      : bootstrap_(std::move(bootstrap)), c_(std::make_shared<Communicator>()) {
    c_->api = std::move(api);
    c_->ordinal = ordinal;
    c_->group = bootstrap_->name();
    check_cuda(cudaSetDevice(ordinal), "cudaSetDevice");
    // Rank 0's unique id, broadcast over the host group as int32 words.
    static_assert(sizeof(ncclUniqueId) % 4 == 0);
    ncclUniqueId id{};
    if (bootstrap_->rank() == 0) c_->check(c_->api->get_unique_id(&id), "ncclGetUniqueId");
    Tensor words = Tensor::empty({static_cast<int64_t>(sizeof id / 4)}, DType::I32, Device::cpu());
    std::memcpy(words.host_raw(), &id, sizeof id);
    bootstrap_->broadcast(words, 0);
    std::memcpy(&id, words.host_raw(), sizeof id);
    c_->check(c_->api->comm_init_rank(&c_->comm, bootstrap_->size(), id, bootstrap_->rank()), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&c_->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    scratch_ = Tensor::zeros({1}, DType::I32, Device{DeviceType::CUDA, ordinal});
  }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  const std::vector<int>& world_ranks() const override { return bootstrap_->world_ranks(); }
  const std::string& name() const override { return bootstrap_->name(); }

  WorkHandle all_reduce_async(const Tensor& t, ReduceOp op) override {
    check_device_tensor("all_reduce", "t", t);
    return launch("all_reduce", t.nbytes(), {t}, [&](const NcclApi& n, cudaStream_t s) {
      return n.all_reduce(t.raw(), t.raw(), t.numel(), nccl_type(t.dtype()), nccl_op(op), c_->comm, s);
    });
  }

  WorkHandle all_gather_async(const Tensor& in, const Tensor& out) override {
    check_pair("all_gather", in, out);
    if (out.numel() != size() * in.numel())
      detail::check_numel(*this, "all_gather", "out", out, size() * in.numel(),
                          str_cat("size() * in.numel() = ", size(), " * ", in.numel()));
    return launch("all_gather", in.nbytes(), {in, out}, [&](const NcclApi& n, cudaStream_t s) {
      return n.all_gather(in.raw(), out.raw(), in.numel(), nccl_type(in.dtype()), c_->comm, s);
    });
  }

  WorkHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override {
    check_pair("reduce_scatter", in, out);
    if (in.numel() != size() * out.numel())
      detail::check_numel(*this, "reduce_scatter", "in", in, size() * out.numel(),
                          str_cat("size() * out.numel() = ", size(), " * ", out.numel()));
    return launch("reduce_scatter", in.nbytes(), {in, out}, [&](const NcclApi& n, cudaStream_t s) {
      return n.reduce_scatter(in.raw(), out.raw(), out.numel(), nccl_type(in.dtype()), nccl_op(op), c_->comm, s);
    });
  }

  WorkHandle broadcast_async(const Tensor& t, int root) override {
    check_device_tensor("broadcast", "t", t);
    detail::check_peer(*this, "broadcast", "root", root, /*allow_self=*/true);
    return launch("broadcast", t.nbytes(), {t}, [&](const NcclApi& n, cudaStream_t s) {
      return n.broadcast(t.raw(), t.raw(), t.numel(), nccl_type(t.dtype()), root, c_->comm, s);
    });
  }

  // NCCL has no all-to-all before 2.28: a send and a receive per peer in one group call.
  WorkHandle all_to_all_async(const Tensor& in, const Tensor& out) override {
    check_pair("all_to_all", in, out);
    TESSERA_CHECK(in.numel() % size() == 0, "all_to_all on group ", name(), ": in has ", in.numel(),
                  " elements, not a multiple of the group size ", size());
    detail::check_numel(*this, "all_to_all", "out", out, in.numel(), "in.numel()");
    const std::vector<int64_t> counts(size(), in.numel() / size());
    return exchange("all_to_all", in, counts, out, counts);
  }

  WorkHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                                const std::vector<int64_t>& recv_counts) override {
    const char* op = "all_to_all_v";
    check_pair(op, in, out);
    detail::check_counts(*this, op, "send_counts", in, send_counts);
    detail::check_counts(*this, op, "recv_counts", out, recv_counts);
    return exchange(op, in, send_counts, out, recv_counts);
  }

  WorkHandle send_async(const Tensor& t, int dst, int tag) override {
    check_device_tensor("send", "t", t);
    detail::check_peer(*this, "send", "dst", dst, /*allow_self=*/false);
    TESSERA_CHECK(tag >= 0, "send on group ", name(), ": tag ", tag, " is negative");
    return launch("send", t.nbytes(), {t}, [&](const NcclApi& n, cudaStream_t s) {
      return n.send(t.raw(), t.numel(), nccl_type(t.dtype()), dst, c_->comm, s);
    });
  }

  WorkHandle recv_async(const Tensor& t, int src, int tag) override {
    check_device_tensor("recv", "t", t);
    detail::check_peer(*this, "recv", "src", src, /*allow_self=*/false);
    TESSERA_CHECK(tag >= 0, "recv on group ", name(), ": tag ", tag, " is negative");
    return launch("recv", t.nbytes(), {t}, [&](const NcclApi& n, cudaStream_t s) {
      return n.recv(t.raw(), t.numel(), nccl_type(t.dtype()), src, c_->comm, s);
    });
  }

  // A one-element all-reduce: done on every rank only once every rank has reached it.
  void barrier() override {
    launch("barrier", 0, {scratch_}, [&](const NcclApi& n, cudaStream_t s) {
      return n.all_reduce(scratch_.raw(), scratch_.raw(), 1, ncclInt32, ncclSum, c_->comm, s);
    })->wait();
  }

  std::unique_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
    std::unique_ptr<ProcessGroup> part = bootstrap_->split(color, key, name);
    if (!part) return nullptr;
    return std::make_unique<NcclProcessGroup>(std::move(part), c_->ordinal, c_->api);
  }

 private:
  // Defined, on this group's GPU, of a supported dtype (those of the MPI group, so that a layout's
  // tensors are the same whichever group carries them).
  void check_device_tensor(const char* op, const char* which, const Tensor& t) {
    TESSERA_CHECK(t.defined(), op, " on group ", name(), ": ", which, " is an undefined tensor");
    const Device mine{DeviceType::CUDA, c_->ordinal};
    TESSERA_CHECK(t.device() == mine, op, " on group ", name(), ": ", which, " is on ", t.device().str(),
                  "; this NCCL group works on ", mine.str(), " tensors");
    const DType dt = t.dtype();
    TESSERA_CHECK(dt == DType::F32 || dt == DType::I32 || dt == DType::I64, op, " on group ", name(), ": ", which,
                  " has dtype ", dtype_name(dt), "; supported are fp32, int32 and int64");
  }

  void check_pair(const char* op, const Tensor& in, const Tensor& out) {
    check_device_tensor(op, "in", in);
    check_device_tensor(op, "out", out);
    detail::check_same_dtype(*this, op, in, out);
  }

  // Chunks back to back in rank order: a send of send_counts[j] elements to each rank j and a receive
  // of recv_counts[i] from each rank i, as one NCCL group call (empty ones left out on both sides).
  WorkHandle exchange(const char* op, const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                      const std::vector<int64_t>& recv_counts) {
    const size_t element = dtype_size(in.dtype());
    const ncclDataType_t type = nccl_type(in.dtype());
    return launch(op, in.nbytes(), {in, out}, [&](const NcclApi& n, cudaStream_t s) {
      ncclResult_t r = n.group_start();
      size_t sent = 0, received = 0;
      for (int peer = 0; peer < size() && r == ncclSuccess; ++peer) {
        const size_t send_n = static_cast<size_t>(send_counts[peer]), recv_n = static_cast<size_t>(recv_counts[peer]);
        if (send_n) r = n.send(bytes_of(in) + sent * element, send_n, type, peer, c_->comm, s);
        if (recv_n && r == ncclSuccess) r = n.recv(bytes_of(out) + received * element, recv_n, type, peer, c_->comm, s);
        sent += send_n;
        received += recv_n;
      }
      const ncclResult_t end = n.group_end();
      return r != ncclSuccess ? r : end;
    });
  }

  // Orders the operation after the kernels queued on the device's kernel stream, enqueues it on the
  // communication stream and returns a handle on its completion event.
  template <class Enqueue>
  WorkHandle launch(const char* op, size_t bytes, std::vector<Tensor> buffers, Enqueue enqueue) {
    check_cuda(cudaSetDevice(c_->ordinal), "cudaSetDevice");
    cudaEvent_t ready = nullptr, done = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventRecord(ready, static_cast<cudaStream_t>(tessera::cuda::kernel_stream(c_->ordinal))),
               "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(c_->stream, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);  // released once the wait has been enqueued
    const uint64_t log_id = global_collective_log().record(op, name(), static_cast<int64_t>(bytes), ++seq_);
    c_->check(enqueue(*c_->api, c_->stream), op);
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda(cudaEventRecord(done, c_->stream), "cudaEventRecord");
    return std::make_unique<NcclWork>(c_, op, done, log_id, std::move(buffers));
  }

  std::unique_ptr<ProcessGroup> bootstrap_;
  std::shared_ptr<Communicator> c_;
  Tensor scratch_;
  uint64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_process_group(std::unique_ptr<ProcessGroup> bootstrap, int ordinal,
                                                      const NcclLibrary& nccl) {
  TESSERA_CHECK(bootstrap != nullptr, "make_nccl_process_group: no host group to build the communicator over");
  return std::make_unique<NcclProcessGroup>(std::move(bootstrap), ordinal, std::make_shared<const NcclApi>(nccl));
}

#else  // no nccl.h where this was built

std::unique_ptr<ProcessGroup> make_nccl_process_group(std::unique_ptr<ProcessGroup>, int, const NcclLibrary&) {
  throw Error("this tessera was built without NCCL's header (nccl.h in the CUDA toolkit); use --device-collectives staged");
}

#endif

}  // namespace tessera::comm::cuda
