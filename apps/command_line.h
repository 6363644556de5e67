// Parsing a subcommand's flags with CLI11 the same way everywhere: an unknown flag or a bad value is a
// tessera::Error that points at --help; --help prints the usage.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "core/check.h"
#include "train/args/command_line_flags.h"

namespace tessera::apps {

// A flag's value must be a number > 0. CLI11's own PositiveNumber says "Value 0 not in range 0.000000 to
// 179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878..."
inline const CLI::Validator kPositive(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double value = std::strtod(text.c_str(), &end);
      return end != text.c_str() && *end == '\0' && value > 0 ? "" : text + " must be positive";
    },
    "POSITIVE");

// A flag's value must be an integer >= 0. For an unsigned option (a seed) CLI11 would convert "-1" by
// wrapping it to 2^64 - 1, so the text is checked before the conversion.
inline const CLI::Validator kNonNegativeInteger(
    [](std::string& text) -> std::string {
      uint64_t value = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      return ec == std::errc() && end == text.data() + text.size() ? "" : text + " must be an integer >= 0";
    },
    "UINT");

// Returns false when --help was asked for (and printed): the command should then exit 0.
inline bool parse_command_line(CLI::App& app, const std::vector<std::string>& args, const char* command) {
  train::take_last_occurrence_of_scalars(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::ParseError& e) {
    const std::string unknown = train::unknown_flag_message(app, args);  // a typo, before what it caused
    throw Error(str_cat(unknown.empty() ? e.what() : unknown, " (tessera ", command, " --help lists the flags)"));
  }
  return true;
}

}  // namespace tessera::apps
