// Context parallelism (Megatron-Core's --context-parallel-size): each rank of the context-parallel group
// holds part of every sequence, for every layer. With a causal mask the later tokens attend to more
// keys, so a plain split would leave the last rank most of the work; as Megatron does, the sequence is
// cut into 2 x cp chunks and rank i holds chunks i and 2 x cp - 1 - i (one early, one late), in that
// order. Attention then exchanges key/value blocks around the group's ring (model/ring_attention.h).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "comm/process_group.h"

namespace tessera::parallel {

struct ContextParallelContext {
  comm::ProcessGroup* group = nullptr;
  // When set, ring attention adds here the seconds it waits for the ring's exchanges after computing a
  // step's blocks: the exchange that the blocks did not hide (the trainer's cp-ring-wait timer).
  double* exchange_wait_seconds = nullptr;
  int rank() const { return group->rank(); }
  int size() const { return group->size(); }
};

// Throws "--seq-length=S: must be divisible by 2 x --context-parallel-size=cp (...)" unless the
// sequence cuts into 2 x cp equal chunks.
void check_context_parallel_sequence(int64_t seq_length, int64_t cp);

// The length of each of the 2 x cp chunks.
inline int64_t context_parallel_chunk_length(int64_t seq_length, int cp) { return seq_length / (2 * cp); }
// The global chunk numbers rank `rank` of `cp` holds, in the order it holds them: {rank, 2 cp - 1 - rank}.
inline std::array<int64_t, 2> load_balanced_chunks(int cp, int rank) { return {rank, 2 * cp - 1 - rank}; }
// The global position of a rank's local position `local` (0 <= local < 2 x chunk length).
int64_t context_parallel_global_position(int64_t local, int64_t seq_length, int cp, int rank);

// One step of a ring: every tensor of `send` goes to the next rank of the group ((rank + 1) % size)
// and every tensor of `recv` arrives from the previous one, tagged tag, tag + 1, ... in list order.
// Nothing is waited for: the caller computes, then waits on the handles. The lists pair up across ranks
// (the same number of tensors, of the same sizes, on every rank).
std::vector<comm::WorkHandle> ring_shift_async(comm::ProcessGroup& group, const std::vector<Tensor>& send,
                                               const std::vector<Tensor>& recv, int tag);
void wait_all(std::vector<comm::WorkHandle>& work);

}  // namespace tessera::parallel
