#include "infer/text_generation_server.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "comm/mpi_process_group.h"
#include "core/timer.h"

namespace tessera::infer {
namespace {

using nlohmann::json;

std::atomic<bool> g_stop_requested{false};
extern "C" void request_stop(int) { g_stop_requested.store(true); }

// Sends a string from rank 0 of `group` to the others (length, then the bytes in int32 words).
std::string broadcast_string(comm::ProcessGroup& group, const std::string& text) {
  Tensor length = Tensor::empty({1}, DType::I64);
  length.i64()[0] = static_cast<int64_t>(text.size());
  group.broadcast(length, 0);
  const int64_t n = length.i64()[0];
  Tensor words = Tensor::zeros({std::max<int64_t>(1, (n + 3) / 4)}, DType::I32);
  if (group.rank() == 0) std::memcpy(words.raw(), text.data(), text.size());
  group.broadcast(words, 0);
  return std::string(static_cast<const char*>(words.raw()), static_cast<size_t>(n));
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void reply_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(dump({{"error", message}}), "application/json");
}

// One request as every rank runs it: {"kind": "api"|"completions", "body": ...} or {"kind": "stop"}.
// Returns the response (status, JSON).
std::pair<int, json> execute(const json& command, const LoadedModel& model, const ServerLimits& limits) {
  try {
    const json& body = command["body"];
    TextRequest r = command["kind"] == "api" ? parse_api_request(body, limits) : parse_completions_request(body, limits);
    return {200, run_text_request(r, model.runner(), model.tokenizer(), model.config())};
  } catch (const RequestError& e) {
    return {400, {{"error", e.what()}}};
  } catch (const Error& e) {  // every rank fails the same way (same request, same model)
    return {500, {{"error", e.what()}}};
  }
}

}  // namespace

void run_server(const LoadedModel& model, comm::ProcessGroup& group, const ServerOptions& options, std::ostream& log) {
  // Idle ranks wait for the next request inside a broadcast; it must not count as a hang.
  comm::set_collective_timeout(std::chrono::hours(24 * 365));

  // SIGINT/SIGTERM only set a flag; rank 0's loop below notices it between requests and tells the
  // other ranks to stop (mpirun forwards the signal to every rank: they must outlive it too).
  struct sigaction action = {};
  action.sa_handler = request_stop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that went away must not kill the server

  if (group.rank() != 0) {  // follow rank 0's requests until it says stop
    for (;;) {
      json command = json::parse(broadcast_string(group, ""));
      if (command["kind"] == "stop") return;
      execute(command, model, options.limits);
    }
  }

  // MPI is used only from this (the main) thread, and OpenMP kernels run best there too: HTTP
  // threads queue accepted requests and wait; this thread runs them one at a time (the order every
  // rank follows) and hands back the answers.
  struct Job {
    std::string kind;
    json body;
    std::promise<std::pair<int, json>> answer;
  };
  std::mutex queue_mutex;
  std::condition_variable queue_changed;
  std::deque<Job*> queue;
  bool stopping = false;
  std::mutex log_mutex;

  httplib::Server server;
  server.new_task_queue = [n = options.threads] { return new httplib::ThreadPool(n); };
  server.set_payload_max_length(options.max_body_bytes);
  server.set_read_timeout(options.read_timeout_seconds, 0);
  server.set_write_timeout(options.read_timeout_seconds, 0);
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;  // our own JSON error
    std::string message = res.status == 413 ? "the request body is larger than --max-body-bytes"
                          : res.status == 404 ? "no such endpoint (PUT /api, POST /completions, GET /health)"
                                              : "HTTP error " + std::to_string(res.status);
    res.set_content(dump({{"error", message}}), "application/json");
  });

  auto handle = [&](const char* kind, const httplib::Request& req, httplib::Response& res) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      return reply_error(res, 400, std::string("malformed JSON: ") + e.what());
    }
    // Validate here, so bad requests are answered at once without taking the model.
    TextRequest parsed;
    try {
      parsed = std::string(kind) == "api" ? parse_api_request(body, options.limits)
                                          : parse_completions_request(body, options.limits);
    } catch (const RequestError& e) {
      return reply_error(res, 400, e.what());
    }
    Timer timer;
    Job job{kind, std::move(body), {}};
    std::future<std::pair<int, json>> answer = job.answer.get_future();
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      if (stopping) return reply_error(res, 503, "the server is shutting down");
      queue.push_back(&job);
    }
    queue_changed.notify_all();
    auto [status, response] = answer.get();
    if (!parsed.no_log) {
      std::lock_guard<std::mutex> lock(log_mutex);
      log << "request from " << req.remote_addr << ": " << req.method << " " << req.path << ", "
          << (parsed.prompts.size() + parsed.prompt_ids.size()) << " prompt(s), "
          << parsed.options.sampling.tokens_to_generate << " tokens to generate -> " << status << " in "
          << timer.seconds() << " s" << std::endl;
    }
    res.status = status;
    res.set_content(dump(response), "application/json");
  };
  server.Put("/api", [&](const httplib::Request& req, httplib::Response& res) { handle("api", req, res); });
  server.Post("/completions", [&](const httplib::Request& req, httplib::Response& res) { handle("completions", req, res); });
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });


  auto stop_others = [&] {
    if (group.size() > 1) broadcast_string(group, json{{"kind", "stop"}}.dump());
  };
  // Debian's cpp-httplib 0.11 listens with a backlog of 5, so a burst of clients on a busy machine
  // can be reset before they are accepted; the socket is given a full backlog after binding.
  int listen_socket = -1;
  server.set_socket_options([&](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket = sock;
  });
  int port = options.port;
  bool bound = port == 0 ? (port = server.bind_to_any_port(options.host)) > 0 : server.bind_to_port(options.host, port);
  if (!bound) {
    stop_others();
    throw Error(str_cat("tessera serve: cannot listen on ", options.host, ":", options.port,
                        " (--host/--port: address in use or not available)"));
  }
  if (listen_socket >= 0) ::listen(listen_socket, SOMAXCONN);
  log << " > serving " << model.config().num_layers << "-layer model on http://" << options.host << ":" << port
      << " (PUT /api, POST /completions, GET /health)" << std::endl;
  std::atomic<bool> listener_done{false};
  std::thread listener([&] {
    server.listen_after_bind();
    listener_done.store(true);
    queue_changed.notify_all();
  });

  std::mt19937_64 seeds{std::random_device{}()};
  for (;;) {
    Job* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(queue_mutex);
      queue_changed.wait_for(lock, std::chrono::milliseconds(50), [&] {
        return !queue.empty() || g_stop_requested.load() || listener_done.load();
      });
      if (!queue.empty()) {
        job = queue.front();
        queue.pop_front();
      } else if (g_stop_requested.load() || listener_done.load()) {
        stopping = true;
        break;
      } else {
        continue;
      }
    }
    // No seed: draw one here, so every rank samples with the same.
    const char* seed_field = job->kind == "api" ? "random_seed" : "seed";
    if (!job->body.contains(seed_field)) job->body[seed_field] = seeds() >> 1;
    json command = {{"kind", job->kind}, {"body", std::move(job->body)}};
    if (group.size() > 1) broadcast_string(group, command.dump());
    job->answer.set_value(execute(command, model, options.limits));
  }
  // Stop listening; requests still queued (or in flight) are told the server is going away.
  server.stop();
  while (!listener_done.load()) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      for (Job* job : queue) job->answer.set_value({503, {{"error", "the server is shutting down"}}});
      queue.clear();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  listener.join();
  stop_others();
  log << " > server stopped" << std::endl;
}

}  // namespace tessera::infer
