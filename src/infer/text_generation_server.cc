#include "infer/text_generation_server.h"

#include "core/process_memory.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <ctime>
#include <deque>
#include <map>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "comm/mpi_process_group.h"
#include "infer/batch_decoder.h"
#include "infer/event_stream.h"
#include "infer/http_guard.h"
#include "infer/http_listener.h"
#include "infer/openai_chat.h"
#include "infer/openai_completions.h"
#include "infer/server_batch.h"
#include "core/timer.h"

namespace tessera::infer {
namespace {

using nlohmann::json;

std::atomic<bool> g_stop_requested{false};
extern "C" void request_stop(int) { g_stop_requested.store(true); }

// Sends a string from rank 0 of `group` to the others (length, then the bytes in int32 words).
std::string broadcast_string(comm::ProcessGroup& group, const std::string& text) {
  Tensor length = Tensor::empty({1}, DType::I64);
  length.host_i64()[0] = static_cast<int64_t>(text.size());
  group.broadcast(length, 0);
  const int64_t n = length.host_i64()[0];
  Tensor words = Tensor::zeros({std::max<int64_t>(1, (n + 3) / 4)}, DType::I32);
  if (group.rank() == 0) std::memcpy(words.host_raw(), text.data(), text.size());
  group.broadcast(words, 0);
  return std::string(static_cast<const char*>(words.host_raw()), static_cast<size_t>(n));
}

constexpr const char* kEndpoints =
    "PUT /api, POST /completions, POST /v1/completions, POST /v1/chat/completions, POST /tokenize, POST /detokenize, GET /tokenizer_info, "
    "GET /v1/models, GET /health, GET /metrics";
const std::string kNoSuchEndpoint = std::string("no such endpoint (") + kEndpoints + ")";

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// OpenAI's clients read an error object on its routes (/v1/...); Megatron's clients a string elsewhere.
bool openai_route(const httplib::Request& req) { return req.path.rfind("/v1/", 0) == 0; }

void reply_error(const httplib::Request& req, httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(dump(openai_route(req) ? openai_error(status, message) : json{{"error", message}}), "application/json");
}

// The message of either form of error body.
std::string error_message(const json& body) {
  if (!body.is_object() || !body.contains("error")) return "";
  const json& e = body["error"];
  if (e.is_string()) return e.get<std::string>();
  return e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : "";
}

}  // namespace

int64_t kv_cache_blocks(const BatchingOptions& o, const model::ModelConfig& c) {
  TESSERA_CHECK(o.max_sequences >= 1, "--inference-max-requests=", o.max_sequences, ": must be >= 1");
  TESSERA_CHECK(o.max_waiting >= 0, "--inference-max-waiting-sequences=", o.max_waiting, ": must be >= 0");
  TESSERA_CHECK(o.block_size >= 1, "--inference-dynamic-batching-block-size=", o.block_size, ": must be >= 1");
  TESSERA_CHECK(o.buffer_gb > 0, "--inference-dynamic-batching-buffer-size-gb=", o.buffer_gb, ": must be > 0");
  TESSERA_CHECK(o.max_tokens >= 0, "--inference-dynamic-batching-max-tokens=", o.max_tokens, ": must be >= 0");
  TESSERA_CHECK(o.max_tokens == 0 || o.chunked_prefill, "--inference-dynamic-batching-max-tokens=", o.max_tokens,
                ": needs --enable-chunked-prefill (without it a step feeds every joining prompt whole)");
  // A buffer the machine cannot hold would end in std::bad_alloc (or the kernel's OOM killer) once allocated.
  const double machine = physical_memory_bytes(), gib = static_cast<double>(1 << 30);
  TESSERA_CHECK(machine == 0 || o.buffer_gb * gib <= machine, "--inference-dynamic-batching-buffer-size-gb=", o.buffer_gb,
                ": more than this machine's memory (", machine / gib, " GiB)");
  const double bytes_per_block = static_cast<double>(c.kv_cache_floats_per_position()) * sizeof(float) *
                                 static_cast<double>(o.block_size);
  const double blocks = std::floor(o.buffer_gb * static_cast<double>(1 << 30) / bytes_per_block);
  TESSERA_CHECK(blocks >= 1, "--inference-dynamic-batching-buffer-size-gb=", o.buffer_gb,
                " holds no key/value block of --inference-dynamic-batching-block-size=", o.block_size, " positions (",
                bytes_per_block / (1 << 20), " MiB each for this model)");
  return static_cast<int64_t>(std::min(blocks, 1e9));
}

int64_t max_step_tokens(const BatchingOptions& o) {
  if (!o.chunked_prefill) return 0;
  return o.max_tokens > 0 ? o.max_tokens : kDefaultChunkedPrefillTokens;
}

void run_server(const LoadedModel& model, comm::ProcessGroup& group, const ServerOptions& options, std::ostream& log,
                BoundListener listener) {
  // Idle ranks wait for the next step inside a broadcast; it must not count as a hang.
  comm::set_collective_timeout(std::chrono::hours(24 * 365));

  // SIGINT/SIGTERM only set a flag; rank 0's loop below notices it between steps, finishes the running
  // batch and tells the other ranks to stop (mpirun forwards the signal to every rank: they must outlive
  // it too).
  struct sigaction action = {};
  action.sa_handler = request_stop;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that went away must not kill the server

  const BatchingOptions& batching = options.batching;
  const int64_t pool_blocks = kv_cache_blocks(batching, model.config());
  auto fresh_decoder = [&] {
    return std::make_unique<BatchDecoder>(model.runner(), pool_blocks, batching.block_size, &model.tokenizer(),
                                          batching.prefix_caching, max_step_tokens(batching));
  };
  ServingBatch batch{fresh_decoder(), {}, {}};
  const ServerLimits limits = resolve_limits(options.limits, model.tokenizer(), model.config());
  const model::ModelConfig& config = model.config();
  const ServedModel served{options.served_model_name, static_cast<int64_t>(std::time(nullptr)),
                           config.position_embedding == model::PositionEmbedding::LearnedAbsolute || config.seq_length <= 0
                               ? config.max_position_embeddings
                               : config.seq_length};

  // Every rank renders conversations with the same template (made from the same flags).
  std::unique_ptr<ChatTemplate> chat_template;
  if (options.chat_unavailable.empty()) chat_template = std::make_unique<ChatTemplate>(options.chat_template, model.tokenizer());
  const ChatSetup chat{chat_template.get(), options.chat_unavailable, served.max_model_len};

  // A step command, from rank 0 to the others: {"stop": true} or {"join": [[slot, kind, body], ...],
  // "cancel": [slot, ...]} (requests whose clients went away: dropped before the step).
  auto joining_of = [&](const json& command) {
    std::vector<std::pair<int64_t, RequestSequences>> joining;
    for (const json& j : command["join"])
      joining.emplace_back(j[0].get<int64_t>(), prepare_request(j[1].get<std::string>(), j[2], model, limits, chat));
    return joining;
  };
  if (group.rank() != 0) {  // follow rank 0's steps until it says stop
    for (;;) {
      const json command = json::parse(broadcast_string(group, ""));
      if (command.value("stop", false)) return;
      cancel_requests(batch, command.value("cancel", std::vector<int64_t>{}));
      std::vector<int64_t> failed;
      std::string error;
      run_batch_step(batch, joining_of(command), failed, error, fresh_decoder);
    }
  }

  // MPI is used only from this (the main) thread, and OpenMP kernels run best there too: HTTP threads
  // validate and queue requests, then wait; this thread runs the batch and hands back the answers.
  struct Job {
    std::string kind;
    json body;
    RequestSequences sequences;  // as every rank will prepare them
    int64_t blocks = 0;          // the cache blocks of all its sequences
    std::vector<Generation> generations;
    size_t remaining = 0;
    std::promise<std::pair<int, json>> answer;  // a whole response's (not streamed)
    std::shared_ptr<TokenChannel> stream;       // a streamed response's tokens
    // Answers a request that did not finish: its status and message, in the form it is answered in.
    void fail(int status, const std::string& message) {
      if (stream) stream->push({TokenChannel::Event::Kind::Failed, 0, -1, {}, status, message});
      else answer.set_value({status, {{"error", message}}});
    }
  };
  std::mutex queue_mutex;
  std::condition_variable queue_changed;
  std::deque<std::shared_ptr<Job>> queue;
  int64_t queued_sequences = 0;
  bool stopping = false;
  std::mutex log_mutex;
  std::mt19937_64 seeds{std::random_device{}()};
  const int64_t max_sequences = batching.max_sequences;

  GuardedServer& server = listener->server;
  auto log_line = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mutex);
    log << line << std::endl;
  };
  listener->log = [&](const std::string& line) { log_line(" > " + line); };
  server.set_payload_max_length(options.max_body_bytes);
  // Every refused request is logged here, with its status and reason (answered ones by their handler,
  // with what they asked for).
  server.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
    if (res.status < 400) return;
    std::string reason;
    try {
      reason = error_message(json::parse(res.body));
    } catch (const json::exception&) {
    }
    log_line(str_cat("request from ", GuardedServer::client_address(), ": ", req.method.empty() ? "?" : req.method, " ",
                     req.path, " -> ", res.status, ": ", reason));
  });
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // our own JSON error
    auto [status, why] = GuardedServer::read_failure();
    if (status != 0) res.status = status;
    std::string message = status != 0           ? why
                          : res.status == 413 ? "the request body is larger than --max-body-bytes"
                          : res.status == 404 ? kNoSuchEndpoint
                          : res.status == 400 ? "malformed HTTP request"
                                              : "HTTP error " + std::to_string(res.status);
    reply_error(req, res, res.status, message);
  });
  // Framing is checked before any body is read; a refused request's connection closes, since the rest of
  // its body could not be told from a next request.
  server.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    auto [status, why] = check_framing(req, options.max_body_bytes);
    if (status == 0) {
      // GET and HEAD bodies are not read (httplib expects none): their connection must not go on.
      if (req.has_header("Transfer-Encoding") ||
          (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0"))
        if (req.method == "GET" || req.method == "HEAD") GuardedServer::close_after(req);
      return httplib::Server::HandlerResponse::Unhandled;
    }
    GuardedServer::close_after(req);
    reply_error(req, res, status, why);
    return httplib::Server::HandlerResponse::Handled;
  });

  // The body, up to --max-body-bytes whatever its framing: a chunked one is counted as it arrives and
  // refused (413) as soon as it passes the limit, not after it has been read in full.
  auto read_body = [&](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                       std::string& body) {
    bool too_large = false;
    const bool read = reader([&](const char* data, size_t n) {
      if (body.size() + n > options.max_body_bytes) {
        too_large = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    if (read) return true;
    GuardedServer::close_after(req);
    auto [status, why] = GuardedServer::read_failure();
    if (too_large)
      reply_error(req, res, 413, str_cat("the request body is larger than --max-body-bytes ", options.max_body_bytes));
    else
      reply_error(req, res, status != 0 ? status : 400, status != 0 ? why : "the request body could not be read");
    return false;
  };

  auto new_id = [&](const char* prefix) {
    std::lock_guard<std::mutex> lock(queue_mutex);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(seeds()));
    return std::string(prefix) + hex;
  };
  auto handle = [&](const char* kind, const httplib::Request& req, httplib::Response& res,
                    const httplib::ContentReader& reader) {
    auto shared_job = std::make_shared<Job>();
    Job& job = *shared_job;
    job.kind = kind;
    std::string text;
    if (!read_body(req, res, reader, text)) return;
    try {
      job.body = json::parse(text);
    } catch (const json::exception& e) {
      return reply_error(req, res, 400, std::string("malformed JSON: ") + e.what());
    }
    // No seed: draw one here, so every rank samples with the same.
    const char* seed_field = job.kind == "api" ? "random_seed" : "seed";
    if (job.body.is_object() && (!job.body.contains(seed_field) || job.body[seed_field].is_null())) {
      std::lock_guard<std::mutex> lock(queue_mutex);
      job.body[seed_field] = seeds() >> 1;
    }
    // Validate and tokenize here, so bad requests are answered at once without taking the model.
    try {
      job.sequences = prepare_request(job.kind, job.body, model, limits, chat);
    } catch (const RequestError& e) {
      return reply_error(req, res, 400, e.what());
    }
    const RequestSequences& r = job.sequences;
    for (const auto& prompt : r.prompts)  // as BatchDecoder::blocks_needed
      job.blocks += KvBlockAllocator::blocks_for(
          static_cast<int64_t>(prompt.size()) + r.options->sampling.tokens_to_generate, batching.block_size);
    if (job.blocks > pool_blocks)
      return reply_error(req, res, 400, str_cat("the request's ", r.prompts.size(), " prompt(s) need ", job.blocks,
                                           " key/value cache blocks of ", batching.block_size,
                                           " positions, more than the server's ", pool_blocks,
                                           " (--inference-dynamic-batching-buffer-size-gb)"));
    const int64_t n = static_cast<int64_t>(r.prompts.size());
    job.remaining = r.prompts.size();
    job.generations.resize(r.prompts.size());
    Timer timer;
    std::future<std::pair<int, json>> answer = job.answer.get_future();
    const TextRequest& t = r.request;
    if (t.stream) job.stream = std::make_shared<TokenChannel>([&] { queue_changed.notify_all(); });
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      if (stopping) return reply_error(req, res, 503, "the server is shutting down");
      // A bounded number of sequences may wait (a request larger than the bound, only into an empty
      // queue); beyond that the client is told to come back.
      if (queued_sequences > 0 && queued_sequences + n > batching.max_waiting)
        return reply_error(req, res, 503, str_cat("the server is full: ", queued_sequences,
                                             " sequences are waiting (--inference-max-waiting-sequences ",
                                             batching.max_waiting, ") to join the running batch of at most ",
                                             max_sequences, " (--inference-max-requests); retry later"));
      queued_sequences += n;
      queue.push_back(shared_job);
    }
    queue_changed.notify_all();
    const bool chat_kind = t.kind == TextRequest::Kind::Chat;
    if (t.stream) {  // answered as the tokens come, by this thread, from the provider httplib calls next
      if (!t.no_log)
        log_line(str_cat("request from ", req.remote_addr, ": ", req.method, " ", req.path, ", ", n, " prompt(s), ",
                         t.options.sampling.tokens_to_generate, " tokens to generate -> streamed"));
      auto writer = std::make_shared<EventStreamWriter>(t, r.prompts, model.tokenizer(), served,
                                                        new_id(chat_kind ? "chatcmpl-" : "cmpl-"), std::time(nullptr));
      return serve_event_stream(res, job.stream, writer, [] { return GuardedServer::client_gone(); });
    }
    auto [status, response] = answer.get();
    if (status != 200) return reply_error(req, res, status, response.value("error", ""));
    // The response is built here, not on the decoding thread, which every other request waits for.
    if (t.kind == TextRequest::Kind::OpenAi) {
      response = openai_completions_response(job.generations, t, model.tokenizer(), served, new_id("cmpl-"),
                                             std::time(nullptr));
    } else if (chat_kind) {
      response = chat_completion_response(job.generations, t, model.tokenizer(), served, new_id("chatcmpl-"),
                                          std::time(nullptr));
    } else {
      response = t.kind == TextRequest::Kind::Api ? api_response(job.generations, t, model.tokenizer())
                                                  : completions_response(job.generations, t, model.tokenizer());
    }
    if (!t.no_log)
      log_line(str_cat("request from ", req.remote_addr, ": ", req.method, " ", req.path, ", ", n, " prompt(s), ",
                       t.options.sampling.tokens_to_generate, " tokens to generate -> ", status, " in ",
                       timer.seconds(), " s"));
    res.status = status;
    res.set_content(dump(response), "application/json");
  };
  using httplib::ContentReader;
  using httplib::Request;
  using httplib::Response;
  server.Put("/api", [&](const Request& req, Response& res, const ContentReader& reader) { handle("api", req, res, reader); });
  server.Post("/completions", [&](const Request& req, Response& res, const ContentReader& reader) {
    handle("completions", req, res, reader);
  });
  server.Post("/v1/completions", [&](const Request& req, Response& res, const ContentReader& reader) {
    handle("v1", req, res, reader);
  });
  server.Post("/v1/chat/completions", [&](const Request& req, Response& res, const ContentReader& reader) {
    handle("chat", req, res, reader);
  });
  // The tokenizer's endpoints need no model step: they are answered on the HTTP thread.
  auto tokenizer_endpoint = [&](const Request& req, Response& res, const ContentReader& reader,
                                const std::function<json(const json&)>& answer) {
    std::string text;
    if (!read_body(req, res, reader, text)) return;
    try {
      res.set_content(dump(answer(json::parse(text))), "application/json");
    } catch (const json::exception& e) {
      reply_error(req, res, 400, std::string("malformed JSON: ") + e.what());
    } catch (const RequestError& e) {
      reply_error(req, res, 400, e.what());
    }
  };
  server.Post("/tokenize", [&](const Request& req, Response& res, const ContentReader& reader) {
    tokenizer_endpoint(req, res, reader, [&](const json& body) { return tokenize_response(body, model.tokenizer(), limits, served); });
  });
  server.Post("/detokenize", [&](const Request& req, Response& res, const ContentReader& reader) {
    tokenizer_endpoint(req, res, reader, [&](const json& body) { return detokenize_response(body, model.tokenizer(), limits); });
  });
  server.Get("/tokenizer_info", [&](const Request&, Response& res) {
    res.set_content(dump(tokenizer_info(model.tokenizer(), served)), "application/json");
  });
  server.Get("/v1/models", [&](const Request&, Response& res) {
    res.set_content(dump(models_response(served)), "application/json");
  });
  // Any other PUT or POST is answered without reading its body (httplib would read it with no bound).
  auto elsewhere = [](const Request& req, Response& res, const ContentReader&) {
    GuardedServer::close_after(req);
    reply_error(req, res, 404, kNoSuchEndpoint);
  };
  server.Put(".*", elsewhere);
  server.Post(".*", elsewhere);
  // Prometheus's text format, with vLLM's prefix-cache counters (in prompt tokens): those looked up and
  // those found (their prefill skipped). The decoding thread updates them after each step.
  std::atomic<int64_t> prefix_queries{0}, prefix_hits{0};
  server.Get("/metrics", [&](const Request&, Response& res) {
    res.set_content(str_cat("# HELP tessera:prefix_cache_queries_total Prompt tokens looked up in the prefix cache.\n",
                            "# TYPE tessera:prefix_cache_queries_total counter\n",
                            "tessera:prefix_cache_queries_total ", prefix_queries.load(), "\n",
                            "# HELP tessera:prefix_cache_hits_total Prompt tokens found in the prefix cache "
                            "(not prefilled).\n",
                            "# TYPE tessera:prefix_cache_hits_total counter\n",
                            "tessera:prefix_cache_hits_total ", prefix_hits.load(), "\n"),
                    "text/plain; version=0.0.4");
  });
  server.Get("/health", [](const Request&, Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });

  auto stop_others = [&] {
    if (group.size() > 1) broadcast_string(group, json{{"stop", true}}.dump());
  };
  const int port = listener->port;
  log << " > serving " << model.config().num_layers << "-layer model on http://" << options.host << ":" << port
      << " (" << kEndpoints << "); up to " << max_sequences << " sequences at once, "
      << pool_blocks << " key/value blocks of " << batching.block_size << " positions; prompts of at most "
      << limits.max_prompt_tokens << " tokens and " << limits.max_prompt_bytes << " bytes; chat template "
      << (chat_template ? options.chat_template_note : "none: " + options.chat_unavailable) << "; prefix caching "
      << (batching.prefix_caching ? "on" : "off") << "; chunked prefill "
      << (batching.chunked_prefill ? str_cat("on (at most ", max_step_tokens(batching), " tokens a step)") : "off")
      << std::endl;
  std::atomic<bool> listener_done{false};
  std::thread http_thread([&] {
    server.listen_after_bind();
    listener_done.store(true);
    queue_changed.notify_all();
  });

  // The running requests by slot; a request is answered when its last sequence finishes.
  std::map<int64_t, std::shared_ptr<Job>> running;
  int64_t next_slot = 0;
  int64_t steps = 0, most_sequences = 0, sequence_steps = 0;  // for the closing line
  auto answer = [&](int64_t slot, int status, json response) {
    Job& job = *running.at(slot);
    if (status != 200) job.fail(status, response.value("error", ""));
    else if (!job.stream) job.answer.set_value({status, std::move(response)});
    running.erase(slot);
  };
  // The tokens of streamed requests, as each step samples them.
  auto on_token = [&](int64_t slot, size_t prompt, int32_t token) {
    const auto found = running.find(slot);
    if (found != running.end() && found->second->stream)
      found->second->stream->push({TokenChannel::Event::Kind::Token, prompt, token, {}, 0, ""});
  };
  StepTimes step_times;
  for (;;) {
    Timer loop_timer;
    json command = {{"join", json::array()}};
    std::vector<std::pair<int64_t, RequestSequences>> joining;
    std::vector<int64_t> cancelled;
    {
      std::unique_lock<std::mutex> lock(queue_mutex);
      if (running.empty())  // idle: the time waiting is not the next step's
        queue_changed.wait_for(lock, std::chrono::milliseconds(50), [&] {
          return !queue.empty() || g_stop_requested.load() || listener_done.load();
        });
      if (g_stop_requested.load() || listener_done.load()) stopping = true;
      // Streamed requests whose clients went away: dropped from the queue, or from the batch before this
      // step (on every rank), which frees their cache blocks for the requests below.
      auto gone = [](const Job& job) { return job.stream && job.stream->cancelled(); };
      loop_timer.reset();
      std::erase_if(queue, [&](const std::shared_ptr<Job>& job) {
        const bool drop = gone(*job);  // once: the client may leave meanwhile
        if (drop) queued_sequences -= static_cast<int64_t>(job->sequences.prompts.size());
        return drop;
      });
      std::erase_if(running, [&](const auto& entry) {
        const bool drop = gone(*entry.second);
        if (drop) cancelled.push_back(entry.first);
        return drop;
      });
      if (!cancelled.empty()) {
        const int64_t dropped = cancel_requests(batch, cancelled);
        command["cancel"] = cancelled;
        log_line(str_cat("client of a streamed request went away: dropped its ", dropped, " sequence(s); ",
                         batch.decoder->cache().available_blocks(), " of ", pool_blocks, " key/value blocks free"));
      }
      // Waiting requests join in order while their sequences and cache blocks fit (one larger than
      // --inference-max-requests runs alone). Cached prefix blocks no sequence uses count as free (they
      // are evicted when needed); a request's prefix found in the cache only lowers what it takes, so
      // counting all its blocks never admits one that does not fit.
      int64_t sequences = batch.decoder->active(), free_blocks = batch.decoder->cache().available_blocks();
      while (!stopping && !queue.empty()) {
        std::shared_ptr<Job> job = queue.front();
        const int64_t n = static_cast<int64_t>(job->sequences.prompts.size());
        if ((sequences > 0 && sequences + n > max_sequences) || job->blocks > free_blocks) break;
        queue.pop_front();
        queued_sequences -= n;
        sequences += n;
        free_blocks -= job->blocks;
        const int64_t slot = next_slot++;
        running[slot] = job;
        if (group.size() > 1) command["join"].push_back({slot, job->kind, job->body});  // a copy of the body
        joining.emplace_back(slot, job->sequences);
      }
    }
    if (stopping && running.empty() && cancelled.empty()) break;
    if (running.empty() && cancelled.empty()) continue;
    if (group.size() > 1) broadcast_string(group, command.dump());
    int64_t stepping = batch.decoder->active();
    for (const auto& [slot, r] : joining) stepping += static_cast<int64_t>(r.prompts.size());
    if (stepping > 0) ++steps;  // not a step that only dropped cancelled sequences
    sequence_steps += stepping;
    most_sequences = std::max(most_sequences, stepping);
    std::vector<int64_t> failed;
    std::string error;
    // Tokens are handed out one by one only while some request streams (a lookup per token otherwise).
    const bool streaming = std::any_of(running.begin(), running.end(), [](const auto& r) { return r.second->stream; });
    std::function<void(int64_t, size_t, int32_t)> tokens;
    if (streaming) tokens = on_token;
    for (FinishedSequence& d : run_batch_step(batch, joining, failed, error, fresh_decoder, tokens)) {
      Job* job = running.at(d.slot).get();
      if (job->stream) job->stream->push({TokenChannel::Event::Kind::Finished, d.prompt, -1, d.generation, 0, ""});
      job->generations[d.prompt] = std::move(d.generation);
      if (--job->remaining > 0) continue;
      answer(d.slot, 200, nullptr);  // the HTTP thread builds the response
    }
    for (int64_t slot : failed)
      if (running.count(slot)) answer(slot, 500, {{"error", error}});
    prefix_queries.store(batch.prefix.queried_tokens);
    prefix_hits.store(batch.prefix.cached_tokens);
    const BatchDecoder::StepTiming& timing = batch.decoder->last_step_timing();
    if (stepping > 0)
      step_times.record(stepping, !joining.empty(), timing.model_seconds, timing.step_seconds, loop_timer.seconds());
  }
  // Stop listening; requests still queued (or in flight) are told the server is going away.
  server.stop();
  while (!listener_done.load()) {
    {
      std::lock_guard<std::mutex> lock(queue_mutex);
      for (const std::shared_ptr<Job>& job : queue) job->fail(503, "the server is shutting down");
      queue.clear();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  http_thread.join();
  stop_others();
  log << " > server stopped after " << steps << " decoding steps (at most " << most_sequences
      << " sequences at once, " << (steps ? static_cast<double>(sequence_steps) / static_cast<double>(steps) : 0.0)
      << " on average)";
  if (batching.prefix_caching)
    log << "; prefix cache: " << batch.prefix.cached_tokens << " of " << batch.prefix.queried_tokens
        << " prompt tokens read from the cache, not prefilled";
  log << std::endl;
  if (steps > 0) log << " > " << step_times.summary() << std::endl;
}

}  // namespace tessera::infer
