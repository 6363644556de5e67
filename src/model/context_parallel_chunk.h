// Context parallelism on the model seam: with_context_parallel wraps a causal chunk so that each rank of
// the context-parallel group runs its own two chunks of every sequence (parallel/context_parallel.h:
// rank i holds global chunks i and 2 cp - 1 - i of 2 cp). Its forward cuts those columns out of the
// micro-batch's [batch, seq] tensors (tokens, labels, loss mask, and the global positions that learned
// position embeddings and RoPE read) and runs the chunk on them with ForwardContext::context_parallel
// set: attention runs around the ring (model/ring_attention.h) and the residual stream's dropout is keyed
// by the chunks' global rows (residual_dropout). The losses it adds are sums over this rank's tokens,
// so the trainer sums them over the context-parallel group. Scoring, logits and decoding pass through to
// the whole chunk.
//
// A later pipeline chunk's input is already this rank's part ([2 chunk x batch, hidden], or its
// sequence-parallel share); every chunk cuts its batch, so the last stage has its labels and loss mask.
// Document masks (--reset-attention-mask) are cut alike, their values global positions, for ring
// attention. Not yet (refused): padding masks (BERT) and token slices.
#pragma once

#include <memory>

#include "model/language_model.h"
#include "parallel/context_parallel.h"

namespace tessera::model {

// Columns of this rank's two chunks of a micro-batch, positions made global (batch.positions, or 0 ..
// seq - 1 cut alike), document starts cut alike. A padding mask is refused.
MicroBatch context_parallel_part(const MicroBatch& batch, int cp, int rank);

// `cp` must outlive the returned chunk. With a group of one rank the chunk is returned unwrapped.
std::unique_ptr<LanguageModelChunk> with_context_parallel(std::unique_ptr<LanguageModelChunk> chunk,
                                                          const parallel::ContextParallelContext& cp);

}  // namespace tessera::model
