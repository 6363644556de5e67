// Test-only fault injection, to prove that an error on one rank in the middle of a parallel step ends the
// whole job with that rank's message (instead of leaving the others waiting in a collective).
// TESSERA_INJECT_FAULT="RANK:ITERATION:forward" (or ":backward") makes world rank RANK throw an Error in
// the forward (backward) of the first micro-batch of training iteration ITERATION (1-based);
// ":save" makes the write of RANK's files of the checkpoint of iteration ITERATION fail after its first
// file (on the background thread under --async-save): a disk that fills up or goes away mid-save.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tessera::train {

struct InjectedFault {
  enum class Phase { Forward, Backward, Save };
  int rank = 0;
  int64_t iteration = 0;
  Phase phase = Phase::Forward;
};

// The fault the environment asks for, if any; a malformed value is an Error naming the variable.
std::optional<InjectedFault> injected_fault_from_environment();

// Throws when `fault` is set for this rank, iteration and phase (forward or backward).
void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t iteration, bool in_backward);

// Throws when `fault` is a save fault for this rank and the checkpoint of `iteration`; `file` is the file
// just written.
void maybe_inject_save_fault(const std::optional<InjectedFault>& fault, int rank, int64_t iteration,
                             const std::string& file);

}  // namespace tessera::train
