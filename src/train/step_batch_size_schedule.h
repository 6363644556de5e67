// Megatron's --step-batch-size-schedule "THRESHOLD:BS THRESHOLD:BS ...", the successor of
// --rampup-batch-size in Megatron-LM: from THRESHOLD consumed tokens on, the global batch is BS samples.
// Entries are separated by spaces or commas and taken in threshold order (not the order written); both
// numbers take a K, M, B or T suffix (1e3 .. 1e12) and a decimal point ("2.4B"), read as Megatron's
// int(float(x) * multiplier). Megatron passes --seq-length to its calculator, so a threshold is in tokens
// and becomes THRESHOLD // seq-length samples. After that, the first threshold must be 0 and each later one
// strictly greater; every size positive. (Megatron's StepBatchsizeNumMicroBatchesCalculator,
// megatron/core/num_microbatches_calculator.py.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::train {

struct BatchSizeStep {
  int64_t threshold = 0;  // consumed samples from which `size` applies
  int64_t size = 0;       // the global batch, in samples
};

// The schedule in samples, threshold order; throws Error naming the flag, the value and the rule broken.
std::vector<BatchSizeStep> parse_step_batch_size_schedule(const std::string& schedule, int64_t seq_length);

}  // namespace tessera::train
