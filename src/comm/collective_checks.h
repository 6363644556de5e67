// Argument checks shared by the ProcessGroup implementations, so that a mistake reads the same in a
// single-process run and under mpirun: "<op> on group <name>: <what was wrong>". Internal to comm/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace tessera::comm::detail {

// t is defined, on the CPU, of a supported dtype (fp32, int32, int64) and small enough for MPI's
// int counts.
void check_tensor(const ProcessGroup& g, const char* op, const char* which, const Tensor& t);
// Both tensors of a two-buffer collective have the same dtype.
void check_same_dtype(const ProcessGroup& g, const char* op, const Tensor& in, const Tensor& out);
// t has `expected` elements; `rule` says where the number comes from ("size() * in.numel() = 2 * 4").
// Call sites test the condition first so that a passing check does not format `rule`.
void check_numel(const ProcessGroup& g, const char* op, const char* which, const Tensor& t, int64_t expected,
                 const std::string& rule);
// peer is a valid rank of g; for send and recv it must also not be this rank (a blocking send to
// oneself never completes).
void check_peer(const ProcessGroup& g, const char* op, const char* role, int peer, bool allow_self);
// all_to_all_v: one non-negative count per rank, summing to the tensor's numel.
void check_counts(const ProcessGroup& g, const char* op, const char* which, const Tensor& t,
                  const std::vector<int64_t>& counts);

}  // namespace tessera::comm::detail
