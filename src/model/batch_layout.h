// What every model does first with a MicroBatch: its [batch, seq] tensors turned into the activations'
// [seq, batch] order, and its ids checked against their range.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::model {

// [batch, seq] -> [seq, batch] (row t = s * batch + b).
Tensor to_seq_major(const Tensor& t);
// Throws "<what> id X is outside <range> [0, limit)" for the first id outside it.
void check_ids(const Tensor& ids, int64_t limit, const char* what, const char* range = "the vocabulary");

}  // namespace tessera::model
