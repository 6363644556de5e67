// rank 0's HTTP listener of `tessera serve` (infer/text_generation_server.h binds it before the model
// loads and runs it): the guarded httplib server and where its refusals are logged. Private to the server.
#pragma once

#include <functional>
#include <string>

#include "infer/http_guard.h"

namespace tessera::infer {

struct HttpListener {
  explicit HttpListener(const HttpGuardOptions& guard)
      : server(guard, [this](const std::string& line) { log(line); }) {}
  std::function<void(const std::string&)> log = [](const std::string&) {};  // run_server's log, once it runs
  GuardedServer server;
  int port = 0;
};

}  // namespace tessera::infer
