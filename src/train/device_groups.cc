#include "train/device_groups.h"

#include "comm/device_collectives.h"

#if defined(TESSERA_WITH_CUDA)
#include "comm/cuda/nccl_process_group.h"
#endif

namespace tessera::train {

std::vector<std::string> use_device_collectives(comm::ParallelState& state, Device device, const std::string& setting) {
  const comm::DeviceCollectives chosen = comm::parse_device_collectives(setting);
  TESSERA_CHECK(device.type == DeviceType::CUDA, "use_device_collectives: ", device.str(), " is not a GPU");
  std::vector<std::string> reasons;
#if defined(TESSERA_WITH_CUDA)
  state.wrap_groups([&](std::unique_ptr<comm::ProcessGroup> group) {
    std::string reason;
    std::unique_ptr<comm::ProcessGroup> wrapped =
        comm::cuda::make_device_process_group(std::move(group), chosen, device.index, &reason);
    reasons.push_back(std::move(reason));
    return wrapped;
  });
#else
  (void)chosen;
  (void)state;
  TESSERA_CHECK(false, "--device=", device.str(), ": this tessera was built without CUDA");
#endif
  return reasons;
}

}  // namespace tessera::train
