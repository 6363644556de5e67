// `tessera serve --load CKPT [--port 5000]`: Megatron-LM's text generation server (PUT /api, POST
// /completions, GET /health). Under mpirun every rank holds its part of the model and rank 0 answers
// HTTP; SIGINT or SIGTERM stops every rank cleanly.
#include <iostream>

#include "apps/commands.h"
#include "apps/inference_flags.h"
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
  app.add_option("--host", server.host, "Address to listen on (127.0.0.1: this machine only)");
  app.add_option("--port", server.port, "Port to listen on (0: any free port)")->check(CLI::Range(0, 65535));
  app.add_option("--max-body-bytes", server.max_body_bytes, "Largest request body accepted (larger: HTTP 413)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  app.add_option("--max-prompts", server.limits.max_prompts, "Most prompts in one request")->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-tokens-to-generate", server.limits.max_tokens_to_generate,
                 "Most tokens one request may ask for")->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--http-threads", server.threads, "Threads reading and answering HTTP requests")->check(CLI::Range(1, 256));

  return run_on_every_rank(app, args, "serve", [&](comm::ProcessGroup& world) {
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
    infer::run_server(model, world, server, world.rank() == 0 ? std::cout : null_log);
  }, &flags);
}

}  // namespace tessera::apps
