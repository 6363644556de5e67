// The connection handling of `tessera serve` around Debian's cpp-httplib 0.11, which on its own gives
// every connection a worker thread for as long as the client likes (a client sending a header line every
// few seconds holds it indefinitely), drops pipelined requests (its per-request stream forgets bytes read
// ahead), reads a chunked body of any size, and looks up the client's address only after the request is
// read (a client that already left is logged without one). GuardedServer replaces only the per-connection
// loop (httplib's documented extension point for it, the virtual process_and_close_socket) and still
// parses and routes every request with httplib's own process_request.
#pragma once

#include <httplib.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace tessera::infer {

struct HttpGuardOptions {
  int request_timeout_seconds = 10;     // --request-timeout: a request's line, headers and body arrive within it
  int idle_timeout_seconds = 5;         // an open connection waits this long for its next request
  int max_connections_per_client = 16;  // --max-connections-per-client: open connections from one address
  size_t max_request_bytes = 1 << 20;   // a request's headers and body together (the body's own limit is lower)
};

class GuardedServer : public httplib::Server {
 public:
  // `log` receives one line per refused connection (from the worker threads; it must be thread-safe).
  GuardedServer(HttpGuardOptions options, std::function<void(const std::string&)> log);

  // The connection of `req` (being answered on this thread) closes after its answer: the rest of its
  // body is not read, so it could not be told from a next request.
  static void close_after(const httplib::Request& req);
  // Why reading the request being answered on this thread failed, as an HTTP status and message: 408 when
  // it did not arrive in time, 431 when it outgrew the byte bound; {0, ""} otherwise.
  static std::pair<int, std::string> read_failure();
  // The address of the client whose request is being answered on this thread (known even when the
  // request could not be parsed, or the client has gone).
  static std::string client_address();
  // Whether the client whose request is being answered on this thread has closed its connection (or
  // it failed): a streamed answer's writer checks it while it waits, so that a client that left is
  // noticed before the next write.
  static bool client_gone();

 private:
  bool process_and_close_socket(socket_t sock) override;  // httplib's per-connection hook

  HttpGuardOptions options_;
  std::function<void(const std::string&)> log_;
  std::mutex clients_mutex_;
  std::map<std::string, int> open_connections_;  // by client address
};

// The framing headers of a request, checked before its body is read: a Content-Length that is not a
// decimal number, a repeated or conflicting one, one with Transfer-Encoding (the request smuggling
// patterns), a Transfer-Encoding other than chunked, a PUT or POST without either, a body announced
// larger than `max_body_bytes`, a multipart body, or a method other than GET, HEAD, PUT and POST (httplib
// would read their bodies with no bound). Returns the HTTP status and message to answer, or {0, ""}.
std::pair<int, std::string> check_framing(const httplib::Request& req, size_t max_body_bytes);

}  // namespace tessera::infer
