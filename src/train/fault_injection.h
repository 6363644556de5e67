// Test-only fault injection, to prove that an error on one rank in the middle of a parallel step ends the
// whole job with that rank's message (instead of leaving the others waiting in a collective).
// TESSERA_INJECT_FAULT="RANK:ITERATION:forward" (or ":backward") makes world rank RANK throw an Error in
// the forward (backward) of the first micro-batch of training iteration ITERATION (1-based).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::train {

struct InjectedFault {
  int rank = 0;
  int64_t iteration = 0;
  bool in_backward = false;
};

// The fault the environment asks for, if any; a malformed value is an Error naming the variable.
std::optional<InjectedFault> injected_fault_from_environment();

// Throws when `fault` is set for this rank, iteration and phase.
void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t iteration, bool in_backward);

}  // namespace tessera::train
