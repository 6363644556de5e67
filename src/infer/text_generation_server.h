// `tessera serve`: Megatron-LM's text generation server over cpp-httplib. World rank 0 answers HTTP
// (PUT /api, POST /completions, GET /health); each accepted request is sent to the other ranks of
// the model, and all of them generate together. Requests are served one at a time (as Megatron's
// LOCK does), so ranks never disagree on the order of their collectives.
#pragma once

#include <ostream>
#include <string>

#include "infer/loaded_model.h"
#include "infer/text_generation_api.h"

namespace tessera::infer {

struct ServerOptions {
  std::string host = "127.0.0.1";  // --host: loopback only unless asked
  int port = 5000;                 // --port (0: any free port, printed at start)
  ServerLimits limits;
  size_t max_body_bytes = 1 << 20;  // --max-body-bytes: larger bodies get 413
  int threads = 8;                  // HTTP worker threads (requests still run one at a time)
  int read_timeout_seconds = 10;    // a client that sends nothing for this long is dropped
};

// Runs on every rank of `group` (the ranks holding the model: the job's world) until SIGINT or SIGTERM
// reaches its rank 0 (or its HTTP listener fails), then returns on every rank. Rank 0 answers HTTP and
// every rank runs each request in the same order. `log` is written on rank 0 only.
void run_server(const LoadedModel& model, comm::ProcessGroup& group, const ServerOptions& options, std::ostream& log);

}  // namespace tessera::infer
