// The simulated iteration as a Chrome trace (the JSON "traceEvents" format that Perfetto and
// chrome://tracing open): one track per pipeline rank with its forward, backward, receive (p2p) and
// idle spans, then its data-parallel reduction and optimizer step.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/planner.h"

namespace tessera::plan {

// Needs a plan made with PlanOptions::record_timeline.
nlohmann::json chrome_trace(const Plan& plan);
// Writes the trace to `path` atomically (a temporary file renamed into place).
void write_chrome_trace(const Plan& plan, const std::string& path);

}  // namespace tessera::plan
