// Megatron flags that choose among GPU implementations or tune machinery Tessera does not have (fused
// kernels, Transformer Engine, NCCL, data-loader workers, logging that Tessera always does): accepted,
// so that a Megatron training script runs unchanged, and named once at start-up with what Tessera does
// instead. Flags that would change the model or the numbers are not here: they are Tessera's own flags,
// or refused as unknown.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tessera::train {

// Adds the flags to `group`; `given` collects one line per flag the command line sets.
void add_megatron_compat_flags(CLI::App& group, std::vector<std::string>& given);

// The start-up line naming them (empty when none was given).
std::string megatron_compat_note(const std::vector<std::string>& given);

}  // namespace tessera::train
