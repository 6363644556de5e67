#include <cuda_runtime.h>
#include <unistd.h>

#include <functional>

#include "comm/cuda/nccl_process_group.h"
#include "comm/device_staging.h"
#include "comm/host_routing_process_group.h"
#include "comm/staged_process_group.h"

namespace tessera::comm::cuda {

int64_t device_key(int ordinal) {
  char bus[64] = {};
  const cudaError_t status = cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal);
  TESSERA_CHECK(status == cudaSuccess, "cudaDeviceGetPCIBusId(cuda:", ordinal, "): ", cudaGetErrorString(status));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return static_cast<int64_t>(std::hash<std::string>{}(str_cat(host, "/", bus)));
}

std::unique_ptr<ProcessGroup> make_device_process_group(std::unique_ptr<ProcessGroup> mpi, DeviceCollectives setting,
                                                        int ordinal, std::string* reason) {
  CollectivesFacts facts;
  facts.device_tensors = true;
  NcclLibrary nccl;
  std::string why;
  try {
    nccl = load_nccl_library();
  } catch (const Error& e) {
    why = e.what();
  }
  // Every member must take the same path: NCCL only where all of them loaded it.
  Tensor missing = Tensor::empty({1}, DType::I32, Device::cpu());
  missing.host_i32()[0] = nccl.handle ? -1 : mpi->rank();
  mpi->all_reduce(missing, ReduceOp::Max);
  const int without = missing.host_i32()[0];
  facts.nccl_loaded = without < 0;
  if (!facts.nccl_loaded)
    facts.nccl_why = why.empty() ? str_cat("rank ", without, " of the group could not load it") : why;
  facts.shared_device = first_shared_device(*mpi, device_key(ordinal));
  CollectivesChoice choice = choose_collectives(setting, facts, mpi->name());
  if (reason) *reason = choice.reason;
  if (choice.path == CollectivesPath::Nccl) {
    // NCCL takes its GPU's tensors only; the group's host tensors (a layout's scalars) keep to MPI, over
    // a copy of the group (the NCCL group keeps its own for split()).
    std::unique_ptr<ProcessGroup> host = mpi->split(0, mpi->rank(), mpi->name());
    return make_host_routing_process_group(std::move(host), make_nccl_process_group(std::move(mpi), ordinal, nccl));
  }
  return make_staged_process_group(std::move(mpi), make_transfer_staging());
}

}  // namespace tessera::comm::cuda
