// The checks that argument finalisation (arguments*.cc) is written in: a violated rule is an Error
// naming the flag, its value and the rule ("--seq-length=0: must be positive"), so the user knows what to
// change. Internal to train/.
#pragma once

#include <string>

#include "core/check.h"

namespace tessera::train::rules {

template <typename T>
void require(bool ok, const char* flag, T value, const std::string& rule) {
  TESSERA_CHECK(ok, flag, "=", value, ": ", rule);
}

template <typename T>
void require_positive(const char* flag, T value) {
  require(value > 0, flag, value, "must be positive");
}

}  // namespace tessera::train::rules
