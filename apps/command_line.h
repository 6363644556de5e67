// Parsing a subcommand's flags with CLI11 the same way everywhere: an unknown flag or a bad value is a
// tessera::Error that points at --help; --help prints the usage.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "core/check.h"

namespace tessera::apps {

// Returns false when --help was asked for (and printed): the command should then exit 0.
inline bool parse_command_line(CLI::App& app, const std::vector<std::string>& args, const char* command) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return false;
  } catch (const CLI::ParseError& e) {
    throw Error(str_cat(e.what(), " (tessera ", command, " --help lists the flags)"));
  }
  return true;
}

}  // namespace tessera::apps
