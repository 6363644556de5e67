// What every command's flag parsing shares (tessera train's and apps/command_line.h's): argparse's rule
// that a flag given twice takes its last occurrence, and the message for a flag no command knows.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace tessera::train {

// As with argparse in Megatron's scripts, a single-valued flag given twice takes its last value, so a
// script can append an override. Each occurrence is converted and validated as it is read
// (trigger_on_parse), so an error names the value that is wrong ("--train-iters = 2.5"), not all the
// occurrences joined ("--train-iters = 2,2.5"). List flags keep their own policy (keep_last_occurrence,
// or all values for one that repeats, as --prompt).
void take_last_occurrence_of_scalars(CLI::App& app);

// "unknown flag --num-layer (did you mean --num-layers?)" for the first flag of `args` that `app` (and its
// option groups) does not know, the suggestion when a flag is close to it; empty when every flag is
// known. Asked after a parse error: CLI11 reports a missing required flag first ("--num-layers is
// required") and an unknown one with its value first ("2 --num-layer"), which hides the typo.
std::string unknown_flag_message(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace tessera::train
