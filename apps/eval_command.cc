// `tessera eval --task WIKITEXT103|LAMBADA --valid-data FILE --load CKPT`: Megatron's zero-shot
// evaluation (tasks/zeroshot_gpt). Under mpirun the world is split into tensor-parallel groups and
// the data-parallel replicas share the samples. `--server-url URL` scores through a running `tessera
// serve` instead (one process; the data is tokenized here with the tokenizer flags).
#include <iostream>

#include "apps/commands.h"
#include "apps/inference_flags.h"
#include "data/tokenizer_factory.h"
#include "eval/server_scorer.h"
#include "eval/zeroshot_evaluation.h"

namespace tessera::apps {

int eval_command(const std::vector<std::string>& args) {
  LoadFlags flags;
  infer::LoadOptions& load = flags.load;
  eval::ZeroShotOptions options;
  std::string server_url;
  CLI::App app{"tessera eval: zero-shot WikiText-103 perplexity and LAMBADA accuracy", "tessera eval"};
  app.option_defaults()->always_capture_default();
  add_load_flags(app, flags, /*seq_length_is_the_models=*/false);
  app.add_option("--task", options.task, "WIKITEXT103 or LAMBADA")->required()->check(CLI::IsMember({"WIKITEXT103", "LAMBADA"}));
  app.add_option("--valid-data", options.valid_data, "The task's data file (wiki.test.tokens, lambada_test.jsonl)")
      ->required();
  app.add_option("--seq-length", load.seq_length, "Window length (default: the model's)");
  app.add_option("--overlapping-eval", options.overlapping_eval, "Sliding window for overlapping evaluation");
  app.add_flag("--strict-lambada", options.strict_lambada, "LAMBADA: the whole last word must be predicted");
  app.add_option("--micro-batch-size", options.micro_batch_size, "Samples per forward pass");
  app.add_option("--log-interval", options.log_interval, "Batches between progress lines");
  app.add_option("--server-url", server_url,
                 "Score through a running tessera serve (http://HOST:PORT) instead of loading a checkpoint");
  app.get_option("--load")->required(false);  // one of --load and --server-url, checked below

  return run_on_every_rank(app, args, "eval", [&](comm::ProcessGroup& world) {
    TESSERA_CHECK(server_url.empty() || load.load.empty(), "--server-url=", server_url, ": cannot be combined with --load=",
                  load.load, " (the server holds the model)");
    TESSERA_CHECK(!server_url.empty() || !load.load.empty(), "--load: required (or --server-url to score through a "
                  "running tessera serve)");
    if (!server_url.empty()) {
      TESSERA_CHECK(world.size() == 1, "--server-url=", server_url, ": runs as one process, not ", world.size(),
                    " (the server batches the requests)");
      TESSERA_CHECK(load.seq_length > 0, "--server-url=", server_url,
                    ": needs --seq-length (the window; a local evaluation takes the checkpoint's)");
      TESSERA_CHECK(!load.tokenizer.type.empty(), "--server-url=", server_url,
                    ": needs --tokenizer-type and its files (the served model's tokenizer: the data is tokenized here)");
      eval::check_options(options);
      eval::ServerScorer server(server_url);
      TESSERA_CHECK(server.max_model_len() <= 0 || load.seq_length + 1 <= server.max_model_len(), "--seq-length=",
                    load.seq_length, ": a window and its last label (", load.seq_length + 1, " tokens) exceed the "
                    "server's max_model_len ", server.max_model_len());
      std::unique_ptr<data::Tokenizer> tokenizer = data::build_tokenizer(load.tokenizer);
      options.seq_length = load.seq_length;
      std::cout << " > scoring through " << server_url << " (model " << server.model() << "), task " << options.task
                << ", seq length " << options.seq_length << std::endl;
      eval::ZeroShotResult result = eval::evaluate_zeroshot(
          options, eval::server_batch_scorer(server), *tokenizer, world,
          [](const std::string& line) { std::cout << line << std::endl; });
      std::string line = eval::format_result(result);
      std::string rule(line.size() + 1, '-');
      std::cout << rule << '\n' << line << '\n' << rule << std::endl;
      return;
    }
    eval::check_options(options);  // before the checkpoint, which may take minutes to load
    infer::LoadedModel model(load, world);
    options.seq_length = model.config().seq_length;
    const bool printer = world.rank() == 0;
    if (printer) {
      std::cout << " > loaded " << load.load << " (iteration " << model.iteration() << "), task " << options.task
                << ", seq length " << options.seq_length << std::endl;
    }
    eval::ZeroShotResult result = eval::evaluate_zeroshot(
        options, model.runner(), model.tokenizer(), model.parallel_state().data_group(), [&](const std::string& line) {
          if (printer) std::cout << line << std::endl;
        });
    if (printer) {
      std::string line = eval::format_result(result);
      std::string rule(line.size() + 1, '-');
      std::cout << rule << '\n' << line << '\n' << rule << std::endl;
    }
  }, &flags);
}

}  // namespace tessera::apps
