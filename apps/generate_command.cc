// `tessera generate --load CKPT --prompt TEXT ...`: continues prompts with a trained model, streaming
// the text as it is produced. The model's configuration is read from the checkpoint; the tokenizer is
// the one it was trained with unless the flags name another. Under mpirun the ranks split the model
// (--tensor-model-parallel-size) and rank 0 prints.
#include <fstream>
#include <iostream>
#include <span>

#include "apps/commands.h"
#include "apps/inference_flags.h"
#include "core/file_io.h"
#include "core/timer.h"
#include "infer/generator.h"

namespace tessera::apps {

int generate_command(const std::vector<std::string>& args) {
  LoadFlags flags;
  int64_t micro_batch_size = 1;  // prompts decoded together
  std::vector<std::string> prompts;
  std::string prompt_file;
  infer::GenerationOptions options;
  infer::SamplingOptions& sampling = options.sampling;
  CLI::App app{"tessera generate: continue prompts with a trained checkpoint", "tessera generate"};
  app.option_defaults()->always_capture_default();
  add_load_flags(app, flags);
  app.add_option("--micro-batch-size", micro_batch_size,
                 "Prompts decoded together (1: one after another, streaming the text as it is produced)")
      ->check(kPositive);
  app.add_option("--prompt", prompts, "Prompt text (repeat for several prompts)");
  app.add_option("--prompt-file", prompt_file, "A file of prompts, one per line");
  app.add_option("--tokens-to-generate", sampling.tokens_to_generate, "Tokens to generate per prompt");
  app.add_option("--temperature", sampling.temperature, "Sampling temperature (0: greedy)");
  app.add_option("--top-k", sampling.top_k, "Sample from the k most likely tokens (1: greedy)");
  app.add_option("--top-p", sampling.top_p, "Sample from the smallest set holding this probability");
  app.add_option("--random-seed", sampling.random_seed, "Seed of the sampling")->check(kNonNegativeInteger);
  app.add_option("--stop", options.stop_strings, "Stop after the token that completes this text (repeatable)");
  app.add_flag("--stop-on-eol", options.stop_on_eol, "Stop after a newline");
  app.add_flag("--stop-on-double-eol", options.stop_on_double_eol, "Stop after two newlines");

  return run_on_every_rank(app, args, "generate", [&](comm::ProcessGroup& world) {
    infer::validate(sampling);
    // An empty prompt is refused wherever it comes from, before the model loads: there is nothing to
    // continue, and skipping a blank line of --prompt-file would pair the outputs with the wrong lines.
    for (size_t i = 0; i < prompts.size(); ++i)
      TESSERA_CHECK(!prompts[i].empty(), "--prompt #", i + 1, ": an empty prompt, nothing to continue");
    if (!prompt_file.empty()) {
      std::ifstream in = open_input_file(prompt_file, "--prompt-file=" + prompt_file);
      int64_t number = 0;
      for (std::string line; std::getline(in, line);) {
        ++number;
        if (line.ends_with('\r')) line.pop_back();  // a CRLF file's lines, as Python's universal newlines
        TESSERA_CHECK(!line.empty(), "--prompt-file=", prompt_file, " line ", number,
                      ": an empty prompt, nothing to continue (remove the blank line)");
        prompts.push_back(line);
      }
    }
    TESSERA_CHECK(!prompts.empty(), "--prompt or --prompt-file: no prompt given");
    infer::LoadedModel model(flags.load, world);
    const data::Tokenizer& tokenizer = model.tokenizer();
    sampling.eod = tokenizer.eod();
    const bool printer = world.rank() == 0;
    std::vector<std::vector<int32_t>> ids;
    for (const std::string& p : prompts) {
      ids.push_back(tokenizer.encode(p));
      TESSERA_CHECK(!ids.back().empty(), "prompt '", p, "' has no tokens");
    }
    infer::check_prompts(model.runner().config(), ids, sampling);  // before any prompt is printed

    // Decode each growing continuation and print what is new, so multi-byte characters split over
    // tokens come out whole.
    std::vector<int32_t> generated;
    std::string printed;
    size_t current = 0;
    Timer timer;
    auto finish_line = [&] {
      if (!printer) return;
      std::cout << std::endl;
      std::cerr << " > " << generated.size() << " tokens in " << timer.seconds() << " s ("
                << static_cast<double>(generated.size()) / std::max(timer.seconds(), 1e-9) << " tokens/s)" << std::endl;
    };
    if (micro_batch_size > 1) {  // the prompts run together: each printed whole when all are done
      timer.reset();
      std::vector<infer::Generation> out = infer::generate(model.runner(), ids, options, &tokenizer, {}, micro_batch_size);
      int64_t tokens = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        std::span<const int32_t> all(out[i].tokens);
        std::span<const int32_t> new_tokens = all.subspan(out[i].prompt_length);
        if (!new_tokens.empty() && new_tokens.back() == sampling.eod) new_tokens = new_tokens.first(new_tokens.size() - 1);
        tokens += static_cast<int64_t>(all.size()) - out[i].prompt_length;
        if (printer) std::cout << prompts[i] << infer::continuation_text(tokenizer, ids[i], new_tokens) << std::endl;
      }
      if (printer)
        std::cerr << " > " << tokens << " tokens for " << out.size() << " prompts in " << timer.seconds() << " s ("
                  << static_cast<double>(tokens) / std::max(timer.seconds(), 1e-9) << " tokens/s, "
                  << micro_batch_size << " at once)" << std::endl;
      return;
    }
    if (printer) std::cout << prompts[0] << std::flush;
    infer::generate(model.runner(), ids, options, &tokenizer, [&](size_t i, int32_t token) {
      if (i != current) {  // the next prompt
        finish_line();
        current = i;
        generated.clear();
        printed.clear();
        timer.reset();
        if (printer) std::cout << prompts[i] << std::flush;
      }
      if (token == sampling.eod) return;
      generated.push_back(token);
      if (!printer) return;
      const std::string text = infer::continuation_text(tokenizer, ids[i], generated);
      std::cout << text.substr(std::min(printed.size(), text.size())) << std::flush;
      printed = text;
    }, /*max_batch_size=*/1);
    finish_line();
  }, &flags);
}

}  // namespace tessera::apps
