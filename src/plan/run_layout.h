// The layout of a `tessera train` run, read from its parsed flags: the one mapping from Megatron's
// flags to a plan::Layout, used by `tessera plan` and by the plan line that `tessera train` prints.
#pragma once

#include "plan/layout.h"
#include "train/args/arguments.h"

namespace tessera::plan {

// tp, cp, pp, dp, virtual stages, ep, etp and the token dispatcher (an MoE model), sequence parallelism, batches, recomputation, the distributed optimizer and
// its overlaps, and the precision (--bf16/--fp16) of the run. Attention is the flash kind (Tessera's CPU
// kernel); a GPU plan without --use-flash-attn clears it.
Layout layout_of_run(const train::TrainArguments& a);

}  // namespace tessera::plan
