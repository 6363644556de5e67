#include "train/fault_injection.h"

#include <cstdlib>
#include <sstream>

#include "core/check.h"

namespace tessera::train {

std::optional<InjectedFault> injected_fault_from_environment() {
  const char* value = std::getenv("TESSERA_INJECT_FAULT");
  if (value == nullptr || *value == '\0') return std::nullopt;
  std::istringstream in(value);
  InjectedFault f;
  char colon1 = 0, colon2 = 0;
  std::string phase;
  in >> f.rank >> colon1 >> f.iteration >> colon2 >> phase;
  TESSERA_CHECK(in && colon1 == ':' && colon2 == ':' && (phase == "forward" || phase == "backward" || phase == "save") &&
                    f.rank >= 0 && f.iteration >= 1,
                "TESSERA_INJECT_FAULT=", value, ": expected RANK:ITERATION:forward|backward|save (iteration from 1)");
  f.phase = phase == "forward" ? InjectedFault::Phase::Forward
            : phase == "backward" ? InjectedFault::Phase::Backward
                                  : InjectedFault::Phase::Save;
  return f;
}

void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t iteration, bool in_backward) {
  const auto phase = in_backward ? InjectedFault::Phase::Backward : InjectedFault::Phase::Forward;
  if (!fault || fault->rank != rank || fault->iteration != iteration || fault->phase != phase) return;
  throw Error(str_cat("injected fault (TESSERA_INJECT_FAULT) in the ", in_backward ? "backward" : "forward",
                      " of iteration ", iteration, " on rank ", rank));
}

void maybe_inject_save_fault(const std::optional<InjectedFault>& fault, int rank, int64_t iteration,
                             const std::string& file) {
  if (!fault || fault->rank != rank || fault->iteration != iteration || fault->phase != InjectedFault::Phase::Save)
    return;
  throw Error(str_cat("injected fault (TESSERA_INJECT_FAULT) in the save of iteration ", iteration, " on rank ", rank,
                      ", after writing ", file));
}

}  // namespace tessera::train
