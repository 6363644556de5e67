// Whether a launcher (mpirun, srun, another PMI launcher) started this process, and as which rank: read
// from the environment it sets, so it works before MPI is initialised and without it.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace tessera {

// The rank the launcher gave this process, or nothing when no launcher started it.
inline std::optional<std::string> launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::string(v);
  return std::nullopt;
}

}  // namespace tessera
