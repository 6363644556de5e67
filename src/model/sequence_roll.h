// Megatron's roll_tensor(shifts=-1, dims=-1) on the [seq, batch] layout (row t = s * batch + b): every
// sample's values move one position left and its last position gets 0. Multi-token prediction rolls the
// tokens, labels, loss mask and position ids this way once per depth (model/multi_token_prediction.h).
//
// Under context parallelism a rank holds two distant chunks of each sequence (parallel/context_parallel.h:
// global chunks i and 2 cp - 1 - i), so the value that moves into a chunk's last position is the first
// one of the next global chunk, held by another rank (or by this one): each rank shares its chunks' first
// positions over the context-parallel group, as Megatron's roll_tensor exchanges them between cp ranks.
// Only the sequence's last chunk (rank 0's second) ends in 0, as the single process's last position.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "parallel/context_parallel.h"

namespace tessera::model {

// t: [seq x batch] values (any shape of that many elements; fp32 or int32). cp: the context-parallel group
// whose rank's two chunks t holds (null, or a group of one: t is the whole sequence).
Tensor roll_left(const Tensor& t, int64_t batch, const parallel::ContextParallelContext* cp = nullptr);

}  // namespace tessera::model
