// `tessera generate --load CKPT --prompt TEXT ...`: continues prompts with a trained model, streaming
// the text as it is produced. The model's configuration is read from the checkpoint; the tokenizer is
// the one it was trained with unless the flags name another.
#include <iostream>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "ckpt/checkpoint.h"
#include "core/timer.h"
#include "data/tokenizer_factory.h"
#include "infer/generator.h"

namespace tessera::apps {

int generate_command(const std::vector<std::string>& args) {
  std::string load;
  std::vector<std::string> prompts;
  infer::SamplingOptions sampling;
  data::TokenizerOptions tok;
  CLI::App app{"tessera generate: continue prompts with a trained checkpoint", "tessera generate"};
  app.option_defaults()->always_capture_default();
  app.add_option("--load", load, "Checkpoint directory (its latest iteration)")->required();
  app.add_option("--prompt", prompts, "Prompt text (repeat for several prompts)")->required();
  app.add_option("--tokens-to-generate", sampling.tokens_to_generate, "Tokens to generate per prompt");
  app.add_option("--temperature", sampling.temperature, "Sampling temperature (0: greedy)");
  app.add_option("--top-k", sampling.top_k, "Sample from the k most likely tokens (1: greedy)");
  app.add_option("--top-p", sampling.top_p, "Sample from the smallest set holding this probability");
  app.add_option("--random-seed", sampling.random_seed, "Seed of the sampling");
  app.add_option("--tokenizer-type", tok.type, "Tokenizer (default: the checkpoint's)");
  app.add_option("--vocab-file", tok.vocab_file, "GPT-2 vocabulary (encoder.json)");
  app.add_option("--merge-file", tok.merge_file, "GPT-2 merges (vocab.bpe)");
  app.add_option("--tokenizer-model", tok.tokenizer_model, "SentencePiece model");
  if (!parse_command_line(app, args, "generate")) return 0;
  infer::validate(sampling);

  nlohmann::json run = ckpt::latest_checkpoint_args(load);
  TESSERA_CHECK(run.contains("model"), "checkpoint in ", load, " does not record its model configuration");
  model::GptConfig config = model::config_from_json(run["model"]);
  if (tok.type.empty()) {  // the tokenizer the model was trained with
    tok.type = run.value("tokenizer_type", "");
    if (tok.vocab_file.empty()) tok.vocab_file = run.value("vocab_file", "");
    if (tok.merge_file.empty()) tok.merge_file = run.value("merge_file", "");
    if (tok.tokenizer_model.empty()) tok.tokenizer_model = run.value("tokenizer_model", "");
  }
  if (tok.type == "NullTokenizer" && tok.vocab_size == 0) tok.vocab_size = config.vocab_size - 1;
  std::unique_ptr<data::Tokenizer> tokenizer = data::build_tokenizer(tok);
  TESSERA_CHECK(tokenizer->vocab_size() == config.vocab_size, "the ", tokenizer->name(), " has ",
                tokenizer->vocab_size(), " ids but the checkpoint's model was trained on ", config.vocab_size);
  sampling.eod = tokenizer->eod();

  model::ParameterSet params;
  model::GptModel gpt(config, params);
  params.allocate(0);
  ckpt::load_checkpoint(load, params, nullptr);

  for (const std::string& prompt : prompts) {
    std::vector<int32_t> ids = tokenizer->encode(prompt);
    std::cout << prompt << std::flush;
    // Decode the growing continuation and print what is new, so multi-byte characters split over
    // tokens come out whole.
    std::vector<int32_t> generated;
    std::string printed;
    Timer timer;
    infer::generate(gpt, ids, sampling, [&](int32_t token) {
      if (token == sampling.eod) return;
      generated.push_back(token);
      std::string text = tokenizer->decode(generated);
      if (tokenizer->name() == "NullTokenizer") text = " " + text;
      std::cout << text.substr(std::min(printed.size(), text.size())) << std::flush;
      printed = text;
    });
    std::cout << std::endl;
    std::cerr << " > " << generated.size() << " tokens in " << timer.seconds() << " s ("
              << static_cast<double>(generated.size()) / std::max(timer.seconds(), 1e-9) << " tokens/s)" << std::endl;
  }
  return 0;
}

}  // namespace tessera::apps
