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
  TESSERA_CHECK(in && colon1 == ':' && colon2 == ':' && (phase == "forward" || phase == "backward") && f.rank >= 0 &&
                    f.iteration >= 1,
                "TESSERA_INJECT_FAULT=", value, ": expected RANK:ITERATION:forward|backward (iteration from 1)");
  f.in_backward = phase == "backward";
  return f;
}

void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t iteration, bool in_backward) {
  if (!fault || fault->rank != rank || fault->iteration != iteration || fault->in_backward != in_backward) return;
  throw Error(str_cat("injected fault (TESSERA_INJECT_FAULT) in the ", in_backward ? "backward" : "forward",
                      " of iteration ", iteration, " on rank ", rank));
}

}  // namespace tessera::train
