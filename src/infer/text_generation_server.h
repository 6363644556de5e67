// `tessera serve`: Megatron-LM's text generation server over cpp-httplib. World rank 0 answers HTTP:
// Megatron's endpoints (PUT /api, POST /completions, GET /health), OpenAI's (POST /v1/completions, GET
// /v1/models) and the tokenizer's that clients probe (POST /tokenize, POST /detokenize, GET
// /tokenizer_info), OpenAI's chat (POST /v1/chat/completions, through a chat template), and GET /metrics
// (the prefix cache's counters, Prometheus's text format). /v1/ routes
// stream server-sent events when asked (infer/event_stream.h). Requests are decoded together by continuous batching (infer/batch_decoder.h): between two decoding steps, rank 0 lets the waiting requests that fit join
// the running batch and tells the other ranks of the model which; every rank then runs the same step, so
// ranks never disagree on the order of their collectives. A request is answered as soon as its last
// sequence finishes; its tokens are those it would get alone.
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "infer/chat_template.h"
#include "infer/loaded_model.h"
#include "infer/text_generation_api.h"

namespace tessera::infer {

// The bounds of the running batch (Megatron-Core's dynamic inference flags).
struct BatchingOptions {
  int64_t max_sequences = 64;      // --inference-max-requests: sequences decoded together
  int64_t max_waiting = 256;       // --inference-max-waiting-sequences: sequences waiting to join (then 503)
  double buffer_gb = 1.0;          // --inference-dynamic-batching-buffer-size-gb: the whole model's key/value cache
  int64_t block_size = 256;        // --inference-dynamic-batching-block-size: positions per cache block
  // --[no-]inference-dynamic-batching-enable-prefix-caching: full cache blocks shared between requests
  // with the same prefix (infer/prefix_cache.h)
  bool prefix_caching = true;
  // --enable-chunked-prefill: prompts are fed in chunks so that a step holds the running sequences' next
  // tokens and at most --inference-dynamic-batching-max-tokens tokens in all (max_tokens 0: the default,
  // kDefaultChunkedPrefillTokens); a long prompt no longer stalls the others for one long step.
  bool chunked_prefill = false;
  int64_t max_tokens = 0;
};
inline constexpr int64_t kDefaultChunkedPrefillTokens = 512;

// The most tokens a step feeds (BatchDecoder's max_step_tokens; 0: no bound, prompts fed whole).
int64_t max_step_tokens(const BatchingOptions& options);

// The cache blocks a buffer of options.buffer_gb holds for `config` (every layer's keys and values, fp32);
// an Error naming the flags when not even one block fits.
int64_t kv_cache_blocks(const BatchingOptions& options, const model::ModelConfig& config);

struct ServerOptions {
  std::string host = "127.0.0.1";  // --host: loopback only unless asked
  int port = 5000;                 // --port (0: any free port, printed at start)
  ServerLimits limits;
  size_t max_body_bytes = 1 << 20;  // --max-body-bytes: larger bodies (also chunked ones) get 413
  BatchingOptions batching;
  // --http-threads: connections served at once, one thread each (a connection waiting for its answer
  // holds its thread); more wait to be accepted.
  int threads = 64;
  int request_timeout_seconds = 10;    // --request-timeout: a request's line, headers and body arrive within it
  int max_connections_per_client = 16;  // --max-connections-per-client: more from one address get 503
  std::string served_model_name = "tessera";  // --served-model-name: "model" in OpenAI's responses
  // --chat-template: how /v1/chat/completions renders a conversation (resolve_chat_template), and the
  // start-up line's words on it. When chat_unavailable is set there is none: chat requests get HTTP 400
  // with it (the model's own template is not one tessera renders, and no --chat-template was given).
  ChatTemplateKind chat_template = ChatTemplateKind::Plain;
  std::string chat_template_note = "plain";
  std::string chat_unavailable;
};

// rank 0's HTTP listener, bound to its port before the model loads (so that a port in use is said at
// once, not after minutes of loading).
struct HttpListener;
struct HttpListenerDeleter {
  void operator()(HttpListener* listener) const;
};
using BoundListener = std::unique_ptr<HttpListener, HttpListenerDeleter>;
// Throws Error "port N is in use" (or naming --host when the address cannot be bound).
BoundListener bind_listener(const ServerOptions& options);

// Runs on every rank of `group` (the ranks holding the model: the job's world) until SIGINT or SIGTERM
// reaches its rank 0 (or its HTTP listener fails), then returns on every rank. Rank 0 answers HTTP on
// `listener` (from bind_listener; null on the other ranks) and every rank runs each request in the same
// order. `log` is written on rank 0 only.
void run_server(const LoadedModel& model, comm::ProcessGroup& group, const ServerOptions& options, std::ostream& log,
                BoundListener listener);

}  // namespace tessera::infer
