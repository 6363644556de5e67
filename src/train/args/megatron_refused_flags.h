// Megatron flags for features Tessera does not have (FP8, Megatron-FSDP, a separate learning rate for
// the embedding, ...): known by name, so that a Megatron launch script that uses one stops with the flag
// and the reason (and what to use instead) rather than as an unknown flag or a typo.
#pragma once

namespace CLI {
class App;
}

namespace tessera::train {

// Adds the flags to `group`; giving one (with any value) is an Error naming it and why it is refused.
void add_megatron_refused_flags(CLI::App& group);

}  // namespace tessera::train
