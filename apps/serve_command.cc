// `tessera serve --load CKPT [--port 5000]`: Megatron-LM's text generation server (PUT /api, POST
// /completions, GET /health) with OpenAI's /v1/completions and the tokenizer endpoints. Under mpirun every rank holds its part of the model and rank 0 answers
// HTTP; SIGINT or SIGTERM stops every rank cleanly.
#include <filesystem>
#include <iostream>

#include "apps/commands.h"
#include "apps/inference_flags.h"
#include "ckpt/checkpoint.h"
#include "infer/text_generation_server.h"

namespace tessera::apps {

int serve_command(const std::vector<std::string>& args) {
  LoadFlags flags;
  const infer::LoadOptions& load = flags.load;
  int64_t micro_batch_size = 1;  // accepted from Megatron launch scripts; the batch is --inference-max-requests
  infer::ServerOptions server;
  CLI::App app{"tessera serve: Megatron's text generation REST server", "tessera serve"};
  app.option_defaults()->always_capture_default();
  add_load_flags(app, flags);
  app.add_option("--micro-batch-size", micro_batch_size,
                 "Accepted for Megatron's scripts (sequences decoded together: --inference-max-requests)");
  infer::BatchingOptions& batching = server.batching;
  app.add_option("--inference-max-requests", batching.max_sequences,
                 "Most sequences decoded together (continuous batching; 1: one at a time)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--inference-max-waiting-sequences", batching.max_waiting,
                 "Most sequences waiting to join the batch; more get HTTP 503")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--inference-dynamic-batching-buffer-size-gb", batching.buffer_gb,
                 "Key/value cache of the whole model for the running batch, GiB (each rank holds its share)")
      ->check(kPositive);
  app.add_option("--inference-dynamic-batching-block-size", batching.block_size,
                 "Positions per key/value cache block")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_flag("--inference-dynamic-batching-enable-prefix-caching,!--no-inference-dynamic-batching-enable-prefix-caching",
               batching.prefix_caching,
               "Share full key/value blocks between requests whose prompts start alike (on by default; results "
               "do not change)");
  app.add_flag("--enable-chunked-prefill", batching.chunked_prefill,
               "Prefill prompts in chunks beside the running sequences' decoding, so that a long prompt does not "
               "stall them (results do not change)");
  app.add_option("--inference-dynamic-batching-max-tokens", batching.max_tokens,
                 "With --enable-chunked-prefill: most tokens one step feeds (the running sequences' next tokens, "
                 "then prompt chunks); 0: 512")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--host", server.host, "Address to listen on (127.0.0.1: this machine only)");
  app.add_option("--port", server.port, "Port to listen on (0: any free port)")->check(CLI::Range(0, 65535));
  app.add_option("--max-body-bytes", server.max_body_bytes,
                 "Largest request body accepted, chunked or not (larger: HTTP 413, as soon as it is passed)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  app.add_option("--max-prompts", server.limits.max_prompts, "Most prompts in one request")->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-tokens-to-generate", server.limits.max_tokens_to_generate,
                 "Most tokens one request may ask for")->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--max-prompt-tokens", server.limits.max_prompt_tokens,
                 "Most tokens in one prompt (0: the model's positions, or --seq-length under RoPE)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--max-prompt-bytes", server.limits.max_prompt_bytes,
                 "Most bytes in one prompt's text, refused before tokenizing (0: --max-prompt-tokens x (the "
                 "tokenizer's longest token + 1))")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--max-logprobs", server.limits.max_logprobs,
                 "Most top log-probabilities a position may ask for (/v1/completions' logprobs)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  std::string served_model_name;
  app.add_option("--served-model-name", served_model_name,
                 "The model's name in OpenAI's responses and GET /v1/models (default: --load's last folder)");
  app.add_option("--http-threads", server.threads,
                 "Connections served at once, one thread each (a request waiting for the model holds one)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-connections-per-client", server.max_connections_per_client,
                 "Most open connections from one client address (more: HTTP 503 at once)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--request-timeout", server.request_timeout_seconds,
                 "Seconds a request's line, headers and body have to arrive (slower: HTTP 408, connection closed)")
      ->check(CLI::Range(1, 3600));

  std::string chat_template = "auto";
  CLI::Option* chat_flag = app.add_option(
      "--chat-template", chat_template,
      "How /v1/chat/completions renders a conversation: plain, chatml, llama3, auto (the checkpoint's "
      "tokenizer_config.json chat_template when it is one of those; none: plain), or the path of a "
      "tokenizer_config.json or Jinja file holding one of those templates");

  return run_on_every_rank(app, args, "serve", [&](comm::ProcessGroup& world) {
    server.served_model_name = !served_model_name.empty() ? served_model_name
                               : std::filesystem::path(load.load).lexically_normal().filename().string();
    if (server.served_model_name.empty())  // --load ending in "/" or "."
      server.served_model_name = std::filesystem::path(load.load).lexically_normal().parent_path().filename().string();
    // The port first: one in use is said at once, not after the model has loaded.
    infer::BoundListener listener = world.rank() == 0 ? infer::bind_listener(server) : nullptr;
    // The chat template before the model loads, so that one tessera cannot render is said at once. One
    // the flag asks for explicitly must be served; the default (auto) leaves only chat unserved.
    std::string checkpoint_config;
    try {
      const std::map<std::string, std::string> carried = ckpt::latest_tokenizer_files(load.load);
      if (const auto found = carried.find("tokenizer_config"); found != carried.end()) checkpoint_config = found->second;
    } catch (const Error&) {  // no checkpoint there: loading the model says so
    }
    try {
      server.chat_template = infer::resolve_chat_template(chat_template, checkpoint_config, &server.chat_template_note);
    } catch (const Error& e) {
      if (chat_flag->count() > 0) throw;
      server.chat_unavailable = std::string(e.what()) + " (start the server with --chat-template to serve chat)";
    }
    infer::LoadedModel model(flags.load, world);
    infer::kv_cache_blocks(batching, model.config());  // the flags' error before the server starts
    // One model on all the ranks: no replica of it. Under expert parallelism the experts' ranks (ep x etp
    // x pp) may span data-parallel replicas of the dense layers, which then decode every request together.
    const comm::ParallelLayout& layout = model.parallel_state().layout();
    TESSERA_CHECK(layout.expert_data_parallel_size() == 1, "tessera serve: the world of ", world.size(),
                  " ranks must equal --tensor-model-parallel-size x --pipeline-model-parallel-size (",
                  load.tensor_model_parallel_size * load.pipeline_model_parallel_size,
                  "), or for an MoE checkpoint --expert-model-parallel-size x --expert-tensor-parallel-size x "
                  "--pipeline-model-parallel-size: one model serves");
    std::ostream null_log(nullptr);
    infer::run_server(model, world, server, world.rank() == 0 ? std::cout : null_log, std::move(listener));
  }, &flags);
}

}  // namespace tessera::apps
