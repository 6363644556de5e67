#include "infer/http_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

namespace tessera::infer {
namespace {

using Clock = std::chrono::steady_clock;

// What went wrong with the request being read on this thread (each connection is served by one thread,
// and httplib calls the error handler and the route handlers on it).
struct ConnectionState {
  bool close_after = false;
  bool timed_out = false;
  bool too_large = false;
  int timeout_seconds = 0;
  size_t max_bytes = 0;
  std::string client;
  int sock = -1;
};
thread_local ConnectionState t_state;

int poll_for(int sock, short events, int64_t milliseconds) {
  pollfd p{sock, events, 0};
  int n;
  do n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(milliseconds, 0, 1 << 30)));
  while (n < 0 && errno == EINTR);
  return n;
}

// A connection's stream: unlike httplib's own, it lives as long as the connection, so bytes read ahead
// (a pipelined next request) stay for the next request, and every read shares one deadline per request.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int sock, std::string ip, int port, int write_timeout_seconds)
      : sock_(sock), ip_(std::move(ip)), port_(port), write_timeout_ms_(1000 * int64_t{write_timeout_seconds}) {
    buffer_.resize(16 * 1024);
  }

  void start_request(Clock::time_point deadline, size_t max_bytes) {
    deadline_ = deadline;
    max_bytes_ = max_bytes;
    read_bytes_ = 0;
  }
  bool has_buffered() const { return begin_ < end_; }
  // Waits up to `timeout` for a request's first byte (true: one is there).
  bool wait_for_request(Clock::duration timeout, const std::function<bool()>& running) {
    const Clock::time_point until = Clock::now() + timeout;
    while (!has_buffered()) {  // in slices, so that stopping the server is not held up
      if (!running() || Clock::now() >= until) return false;
      const int n = poll_for(sock_, POLLIN, std::min<int64_t>(100, milliseconds_until(until)));
      if (n < 0) return false;
      if (n > 0) return true;
    }
    return true;
  }

  bool is_readable() const override { return has_buffered() || poll_for(sock_, POLLIN, milliseconds_until(deadline_)) > 0; }
  bool is_writable() const override { return poll_for(sock_, POLLOUT, write_timeout_ms_) > 0; }

  ssize_t read(char* ptr, size_t size) override {
    if (read_bytes_ >= max_bytes_) {
      t_state.too_large = true;
      return -1;
    }
    size = std::min(size, max_bytes_ - read_bytes_);
    if (!has_buffered()) {
      if (Clock::now() >= deadline_ || poll_for(sock_, POLLIN, milliseconds_until(deadline_)) <= 0) {
        t_state.timed_out = true;
        return -1;
      }
      ssize_t n;
      do n = ::recv(sock_, buffer_.data(), buffer_.size(), 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;  // 0: the client closed its side
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_.data() + begin_, n);
    begin_ += n;
    read_bytes_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = ip_;
    port = port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t length = sizeof addr;
    ip.clear();
    port = -1;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &length) == 0) address_of(addr, ip, port);
  }
  socket_t socket() const override { return sock_; }

  // The numeric address and port of `addr` (IPv4 or IPv6).
  static void address_of(const sockaddr_storage& addr, std::string& ip, int& port) {
    char text[INET6_ADDRSTRLEN] = "";
    if (addr.ss_family == AF_INET) {
      const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
      ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
      port = ntohs(a.sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
      ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
      port = ntohs(a.sin6_port);
    }
    ip = text;
  }

 private:
  static int64_t milliseconds_until(Clock::time_point t) {
    return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count());
  }

  int sock_;
  std::string ip_;
  int port_;
  int64_t write_timeout_ms_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  Clock::time_point deadline_ = Clock::now();
  size_t max_bytes_ = 0, read_bytes_ = 0;
};

// Closes a connection whose client may still be sending (a request refused unread, a body cut off):
// closing with unread bytes would reset the connection, and the client could lose the answer already
// sent. The answer is followed by FIN, then what arrives is discarded for a bounded while (0.5 s, 4 MiB).
void linger_close(int sock) {
  ::shutdown(sock, SHUT_WR);
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(500);
  char sink[16384];
  for (size_t discarded = 0; discarded < (4u << 20) && Clock::now() < until;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (poll_for(sock, POLLIN, left) <= 0) break;
    const ssize_t n = ::recv(sock, sink, sizeof sink, 0);
    if (n <= 0) break;
    discarded += static_cast<size_t>(n);
  }
}

// Answers a connection without reading its request.
void refuse(int sock, int status, const std::string& reason, const std::string& message) {
  const std::string body = "{\"error\":\"" + message + "\"}";
  const std::string response = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                               "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                               "\r\nConnection: close\r\n\r\n" + body;
  if (poll_for(sock, POLLOUT, 1000) > 0) ::send(sock, response.data(), response.size(), MSG_NOSIGNAL);
  linger_close(sock);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

bool iequals(const std::string& a, const char* b) {
  return a.size() == std::strlen(b) &&
         std::equal(a.begin(), a.end(), b, [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

}  // namespace

GuardedServer::GuardedServer(HttpGuardOptions options, std::function<void(const std::string&)> log)
    : options_(options), log_(std::move(log)) {}

void GuardedServer::close_after(const httplib::Request& req) {
  t_state.close_after = true;
  // httplib answers "Connection: close" when the request asked for it: say so in the request, which
  // process_request owns (not const) and reads again only to write the answer's headers.
  auto& r = const_cast<httplib::Request&>(req);
  r.headers.erase("Connection");
  r.headers.emplace("Connection", "close");
}

std::pair<int, std::string> GuardedServer::read_failure() {
  if (t_state.timed_out)
    return {408, "the request (its line, headers and body) did not arrive within " +
                     std::to_string(t_state.timeout_seconds) + " s (--request-timeout)"};
  if (t_state.too_large)
    return {431, "the request's headers and body are larger than " + std::to_string(t_state.max_bytes) +
                     " bytes (--max-body-bytes plus 64 KiB of headers)"};
  return {0, ""};
}

std::string GuardedServer::client_address() { return t_state.client; }

bool GuardedServer::client_gone() {
  if (t_state.sock < 0) return false;
  pollfd p{t_state.sock, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
  // Readable: a next (pipelined) request's bytes, or the end of the stream when the client closed.
  char byte;
  ssize_t n;
  do n = ::recv(t_state.sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  sockaddr_storage peer{};
  socklen_t length = sizeof peer;
  std::string ip;
  int port = -1;
  if (::getpeername(sock, reinterpret_cast<sockaddr*>(&peer), &length) == 0) DeadlineStream::address_of(peer, ip, port);

  bool admitted;
  int open;
  {
    std::lock_guard<std::mutex> lock(clients_mutex_);
    open = open_connections_[ip];
    admitted = open < options_.max_connections_per_client;
    if (admitted) ++open_connections_[ip];
  }
  if (!admitted) {
    const std::string message = "too many connections from " + ip + ": " + std::to_string(open) +
                                " are open (--max-connections-per-client " +
                                std::to_string(options_.max_connections_per_client) + ")";
    log_("refused a connection: " + message);
    refuse(sock, 503, "Service Unavailable", message);
  } else {
    DeadlineStream strm(sock, ip, port, options_.request_timeout_seconds);
    const auto running = [this] { return svr_sock_ != INVALID_SOCKET; };
    for (size_t served = 0; served < keep_alive_max_count_; ++served) {
      if (!strm.wait_for_request(std::chrono::seconds(options_.idle_timeout_seconds), running)) break;
      t_state = ConnectionState{};
      t_state.timeout_seconds = options_.request_timeout_seconds;
      t_state.max_bytes = options_.max_request_bytes;
      t_state.client = ip;
      t_state.sock = sock;
      strm.start_request(Clock::now() + std::chrono::seconds(options_.request_timeout_seconds),
                         options_.max_request_bytes);
      bool client_closes = false;
      const bool last = served + 1 == keep_alive_max_count_ || !running();
      if (!process_request(strm, last, client_closes, nullptr)) break;
      if (t_state.close_after || t_state.timed_out || t_state.too_large) {
        linger_close(sock);
        break;
      }
      if (client_closes) break;
    }
    std::lock_guard<std::mutex> lock(clients_mutex_);
    if (--open_connections_[ip] == 0) open_connections_.erase(ip);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return true;
}

std::pair<int, std::string> check_framing(const httplib::Request& req, size_t max_body_bytes) {
  if (req.method != "GET" && req.method != "HEAD" && req.method != "PUT" && req.method != "POST")
    return {405, "method " + req.method + " is not served (PUT /api, POST /completions, GET /health)"};
  const size_t lengths = req.get_header_value_count("Content-Length");
  const size_t encodings = req.get_header_value_count("Transfer-Encoding");
  if (lengths > 1)
    return {400, "Content-Length is given " + std::to_string(lengths) +
                     " times: a request must have one length (two could be read differently by a proxy)"};
  if (encodings > 1) return {400, "Transfer-Encoding is given " + std::to_string(encodings) + " times"};
  if (lengths == 1 && encodings == 1)
    return {400, "a request must not have both Content-Length and Transfer-Encoding (a proxy could read either)"};
  if (encodings == 1) {
    const std::string encoding = req.get_header_value("Transfer-Encoding");
    if (!iequals(encoding, "chunked"))
      return {400, "Transfer-Encoding '" + encoding + "' is not supported (only chunked)"};
  }
  if (lengths == 1) {
    const std::string length = req.get_header_value("Content-Length");
    if (!all_digits(length) || length.size() > 19)
      return {400, "Content-Length '" + length + "' is not a non-negative decimal number"};
    if (std::stoull(length) > max_body_bytes)
      return {413, "the request body of " + length + " bytes is larger than --max-body-bytes " +
                       std::to_string(max_body_bytes)};
  }
  if ((req.method == "PUT" || req.method == "POST") && lengths == 0 && encodings == 0)
    return {411, "a " + req.method + " request needs a Content-Length (or a chunked body)"};
  const std::string type = req.get_header_value("Content-Type");
  if (type.rfind("multipart/", 0) == 0) return {415, "the request body must be JSON, not " + type};
  return {0, ""};
}

}  // namespace tessera::infer
