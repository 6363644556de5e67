#include "infer/http_listener.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "infer/text_generation_server.h"

namespace tessera::infer {
namespace {

// Why `host`:`port` cannot be bound (httplib says only that it failed): binds a probe socket for errno.
std::string bind_failure(const std::string& host, int port) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    return str_cat("cannot listen on ", host, ":", port, ": --host ", host, " is not an address of this machine");
  int error = 0;
  const int probe = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  int yes = 1;
  if (probe >= 0 && (::setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes),
                     ::bind(probe, found->ai_addr, found->ai_addrlen) != 0))
    error = errno;
  if (probe >= 0) ::close(probe);
  ::freeaddrinfo(found);
  if (error == EADDRINUSE) return str_cat("port ", port, " is in use (--port; 0 picks a free one)");
  return str_cat("cannot listen on ", host, ":", port, " (--host/--port)", error ? ": " : "",
                 error ? std::strerror(error) : "");
}

}  // namespace

void HttpListenerDeleter::operator()(HttpListener* listener) const { delete listener; }

BoundListener bind_listener(const ServerOptions& options) {
  HttpGuardOptions guard;
  guard.request_timeout_seconds = options.request_timeout_seconds;
  guard.max_connections_per_client = options.max_connections_per_client;
  guard.max_request_bytes = options.max_body_bytes + 64 * 1024;  // the body and its headers
  BoundListener listener(new HttpListener(guard));
  GuardedServer& server = listener->server;
  server.new_task_queue = [n = options.threads] { return new httplib::ThreadPool(n); };
  // Headers and body leave in separate writes; with Nagle's algorithm the body would wait for the
  // client's delayed ACK of the headers (up to 40 ms on Linux) on some requests.
  server.set_tcp_nodelay(true);
  // Debian's cpp-httplib 0.11 listens with a backlog of 5, so a burst of clients on a busy machine
  // can be reset before they are accepted; the socket is given a full backlog after binding.
  int listen_socket = -1;
  server.set_socket_options([&](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket = sock;
  });
  int port = options.port;
  const bool bound = port == 0 ? (port = server.bind_to_any_port(options.host)) > 0
                               : server.bind_to_port(options.host, port);
  if (!bound) throw Error("tessera serve: " + bind_failure(options.host, options.port));
  if (listen_socket >= 0) ::listen(listen_socket, SOMAXCONN);
  listener->port = port;
  return listener;
}

}  // namespace tessera::infer
