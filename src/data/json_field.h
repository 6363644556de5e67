// The member `name` of a JSON object read from a data file, or an error naming `where` (file and line)
// and the missing member: the task datasets' records (RACE, CNTRL) must have every field they use.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/check.h"

namespace tessera::data {

inline const nlohmann::json& required_field(const nlohmann::json& j, const char* name, const std::string& where) {
  TESSERA_CHECK(j.contains(name), where, ": no \"", name, "\"");
  return j.at(name);
}

}  // namespace tessera::data
