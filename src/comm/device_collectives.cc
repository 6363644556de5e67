#include "comm/device_collectives.h"

#include <map>

namespace tessera::comm {

DeviceCollectives parse_device_collectives(const std::string& value) {
  if (value == "auto") return DeviceCollectives::Auto;
  if (value == "staged") return DeviceCollectives::Staged;
  if (value == "nccl") return DeviceCollectives::Nccl;
  throw Error(str_cat("--device-collectives=", value, ": must be auto, staged or nccl"));
}

const char* device_collectives_name(DeviceCollectives setting) {
  switch (setting) {
    case DeviceCollectives::Staged: return "staged";
    case DeviceCollectives::Nccl: return "nccl";
    default: return "auto";
  }
}

const char* collectives_path_name(CollectivesPath path) {
  switch (path) {
    case CollectivesPath::Staged: return "staged";
    case CollectivesPath::Nccl: return "nccl";
    default: return "mpi";
  }
}

CollectivesChoice choose_collectives(DeviceCollectives setting, const CollectivesFacts& facts, const std::string& group) {
  auto choice = [&](CollectivesPath path, const std::string& why) {
    return CollectivesChoice{path, str_cat("group ", group, ": ", collectives_path_name(path), " (", why, ")")};
  };
  if (!facts.device_tensors) return choice(CollectivesPath::Mpi, "host tensors");
  const std::string shared =
      facts.shared_device ? str_cat("ranks ", facts.shared_device->first, " and ", facts.shared_device->second,
                                    " of the group share a GPU, which NCCL refuses")
                          : "";
  switch (setting) {
    case DeviceCollectives::Staged:
      return choice(CollectivesPath::Staged, "--device-collectives staged");
    case DeviceCollectives::Nccl:
      TESSERA_CHECK(facts.nccl_loaded, "--device-collectives=nccl: group ", group, " cannot use NCCL: ", facts.nccl_why,
                    "; use --device-collectives staged or auto");
      TESSERA_CHECK(!facts.shared_device, "--device-collectives=nccl: group ", group, ": ", shared,
                    "; give each rank its own GPU, or use --device-collectives staged or auto");
      return choice(CollectivesPath::Nccl, "--device-collectives nccl");
    default:
      if (!facts.nccl_loaded) return choice(CollectivesPath::Staged, str_cat("no NCCL: ", facts.nccl_why));
      if (facts.shared_device) return choice(CollectivesPath::Staged, shared);
      return choice(CollectivesPath::Nccl, "each rank has its own GPU");
  }
}

std::optional<std::pair<int, int>> first_shared_device(ProcessGroup& g, int64_t device_key) {
  Tensor mine = Tensor::empty({1}, DType::I64, Device::cpu());
  mine.host_i64()[0] = device_key;
  Tensor all = Tensor::empty({g.size()}, DType::I64, Device::cpu());
  g.all_gather(mine, all);
  std::map<int64_t, int> first_user;
  for (int r = 0; r < g.size(); ++r) {
    auto [it, fresh] = first_user.emplace(all.host_i64()[r], r);
    if (!fresh) return std::make_pair(it->second, r);
  }
  return std::nullopt;
}

}  // namespace tessera::comm
