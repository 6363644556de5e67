// `tessera plan --calibrate`: measures this machine for the model's shapes and writes a cluster file
// (plan/calibration.h). Apart from plan_command.cc, which reads cluster files.
#pragma once

#include <string>

#include "model/config.h"
#include "plan/layout.h"

namespace tessera::apps {

// Every rank of the job measures; rank 0 writes `output` and prints what was measured.
int run_calibration(const model::ModelConfig& c, const plan::Layout& l, const std::string& output);

}  // namespace tessera::apps
