// `tessera msdp`: multi-stage prompting for knowledgeable dialogue, with Megatron's tasks/msdp flags.
//   tessera msdp preprocess --func process_wow_dataset|get_knwl_gen_prompts|get_resp_gen_prompts|prepare_input
//     (tasks/msdp/preprocessing.py's --raw_file --processed_file --knwl_ref_file --resp_ref_file --test_file
//     --train_file --knwl_gen_file --data_type --seed)
//   tessera msdp --task MSDP-PROMPT --prompt-type knowledge|response --prompt-file F --sample-input-file F
//     --sample-output-file F (--load CKPT [model flags] | --api-prompt --megatron-api-url URL)
//   tessera msdp --task MSDP-EVAL-F1 --guess-file F --answer-file F
// With --load, generation runs on every rank of an MPI job (tensor and pipeline parallel as generate),
// the prompts decoded together; rank 0 writes. With --api-prompt each prompt goes to a running
// `tessera serve` (or Megatron's server) as PUT {"prompts": [text], "tokens_to_generate": N, "top_k": 1}.
#include <httplib.h>

#include <fstream>
#include <iostream>

#include "apps/commands.h"
#include "apps/inference_flags.h"
#include "core/file_io.h"
#include "core/timer.h"
#include "eval/python_regex.h"
#include "infer/generator.h"
#include "tasks/dialogue_f1.h"
#include "tasks/msdp.h"
#include "tasks/word_tokenize.h"

namespace tessera::apps {
namespace {

using nlohmann::json;

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in = open_input_file(path, path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  write_file_atomically(path, text);
}

int preprocess(const std::vector<std::string>& args) {
  std::string func, raw_file, processed_file, knwl_ref_file, resp_ref_file, knwl_gen_file, test_file, train_file,
      data_type;
  uint64_t seed = 1234;
  bool most_similar_unseen = false;
  CLI::App app{"tessera msdp preprocess: Megatron's tasks/msdp/preprocessing.py", "tessera msdp preprocess"};
  app.add_option("--func", func, "process_wow_dataset, get_knwl_gen_prompts, get_resp_gen_prompts or prepare_input")
      ->required()
      ->check(CLI::IsMember({"process_wow_dataset", "get_knwl_gen_prompts", "get_resp_gen_prompts", "prepare_input"}));
  app.add_option("--raw_file", raw_file, "Wizard of Wikipedia JSON (process_wow_dataset)");
  app.add_option("--processed_file", processed_file, "The output file")->required();
  app.add_option("--knwl_ref_file", knwl_ref_file, "Gold knowledge, one line per sample (process_wow_dataset)");
  app.add_option("--resp_ref_file", resp_ref_file, "Gold responses, word-tokenized (process_wow_dataset)");
  app.add_option("--knwl_gen_file", knwl_gen_file, "Generated knowledge, one line per test sample (prepare_input)");
  app.add_option("--test_file", test_file, "Processed test file");
  app.add_option("--train_file", train_file, "Processed training file");
  app.add_option("--data_type", data_type, "wow_seen, wow_unseen or woi (get_knwl_gen_prompts)");
  app.add_option("--seed", seed, "Shuffle of the response examples (get_resp_gen_prompts)");
  app.add_flag("--most-similar-unseen", most_similar_unseen,
               "Unseen topics: take the most similar dialogues (Megatron's code takes the least similar)");
  if (!parse_command_line(app, args, "msdp preprocess")) return 0;
  auto need = [&](const std::string& value, const char* flag) {
    TESSERA_CHECK(!value.empty(), "--func ", func, " needs ", flag);
  };
  if (func == "process_wow_dataset") {
    need(raw_file, "--raw_file");
    std::ifstream in = open_input_file(raw_file, "--raw_file=" + raw_file);
    json raw;
    try {
      raw = json::parse(in);
    } catch (const json::exception& e) {
      throw Error(str_cat("--raw_file=", raw_file, ": not JSON: ", e.what()));
    }
    std::vector<std::string> processed, knowledge, responses;
    for (const tasks::DialogueSample& s : tasks::process_wow(raw)) {
      processed.push_back(s.line());
      knowledge.push_back(s.knowledge);
      responses.push_back(tasks::word_tokenized(s.response));
    }
    write_lines(processed_file, processed);
    if (!knwl_ref_file.empty()) write_lines(knwl_ref_file, knowledge);
    if (!resp_ref_file.empty()) write_lines(resp_ref_file, responses);
    std::cout << " > " << processed.size() << " Wizard turns to " << processed_file << std::endl;
  } else if (func == "get_knwl_gen_prompts") {
    need(test_file, "--test_file");
    need(train_file, "--train_file");
    need(data_type, "--data_type");
    const tasks::MsdpDataType type = tasks::parse_msdp_data_type(data_type);
    std::vector<std::string> lines;
    for (const tasks::KnowledgePrompt& p : tasks::select_knowledge_prompts(
             tasks::read_processed(test_file), tasks::read_processed(train_file), type, most_similar_unseen))
      lines.push_back(json{{p.key, p.examples}}.dump());
    write_lines(processed_file, lines);
    std::cout << " > knowledge prompts of " << lines.size() << " test samples to " << processed_file << std::endl;
  } else if (func == "get_resp_gen_prompts") {
    need(train_file, "--train_file");
    const std::vector<std::string> examples = tasks::select_response_prompts(tasks::read_processed(train_file), seed);
    TESSERA_CHECK(!examples.empty(), "--train_file=", train_file, ": no training turn copies its knowledge "
                  "(the response examples need 60-90% of the response in runs of 10 knowledge tokens)");
    write_lines(processed_file, examples);
    std::cout << " > " << examples.size() << " response examples to " << processed_file << std::endl;
  } else {
    need(test_file, "--test_file");
    need(knwl_gen_file, "--knwl_gen_file");
    std::vector<std::string> lines;
    for (const tasks::DialogueSample& s :
         tasks::with_generated_knowledge(tasks::read_processed(test_file), read_lines(knwl_gen_file)))
      lines.push_back(s.line());
    write_lines(processed_file, lines);
  }
  return 0;
}

struct PromptFlags {
  std::string task, prompt_type, prompt_file, sample_input_file, sample_output_file, guess_file, answer_file,
      api_url;
  int64_t num_prompt_examples = 10, out_seq_length = 100, micro_batch_size = 8;
  bool api_prompt = false;
};

void add_prompt_flags(CLI::App& app, PromptFlags& f) {
  app.add_option("--task", f.task, "MSDP-PROMPT or MSDP-EVAL-F1")->required()->check(CLI::IsMember({"MSDP-PROMPT", "MSDP-EVAL-F1"}));
  app.add_option("--prompt-type", f.prompt_type, "knowledge or response")->check(CLI::IsMember({"knowledge", "response"}));
  app.add_option("--prompt-file", f.prompt_file, "Stage 1: the JSONL of get_knwl_gen_prompts; stage 2: the examples");
  app.add_option("--sample-input-file", f.sample_input_file, "Processed test file");
  app.add_option("--sample-output-file", f.sample_output_file, "One generation per line (default: input + .out)");
  app.add_option("--num-prompt-examples", f.num_prompt_examples, "Stage 2: examples read from --prompt-file")
      ->check(kPositive);
  app.add_option("--out-seq-length", f.out_seq_length, "Tokens to generate")->check(kPositive);
  app.add_option("--micro-batch-size", f.micro_batch_size, "Prompts decoded together (--load)")->check(kPositive);
  app.add_flag("--api-prompt", f.api_prompt, "Generate through a running server (--megatron-api-url)");
  app.add_option("--megatron-api-url", f.api_url, "The server's PUT endpoint, e.g. http://127.0.0.1:5000/api");
  app.add_option("--guess-file", f.guess_file, "MSDP-EVAL-F1: generated lines");
  app.add_option("--answer-file", f.answer_file, "MSDP-EVAL-F1: gold lines (knowledge or word-tokenized responses)");
}

int evaluate_f1(const PromptFlags& f) {
  TESSERA_CHECK(!f.guess_file.empty() && !f.answer_file.empty(), "--task MSDP-EVAL-F1 needs --guess-file and --answer-file");
  std::vector<std::string> guesses = read_lines(f.guess_file), answers = read_lines(f.answer_file);
  for (std::string& g : guesses)
    eval::replace_all(g, "<|endoftext|>", "");
  for (std::string& a : answers) {
    a = tasks::msdp_output(a);  // stripped
    if (a == "no_passages_used") a.clear();  // as Megatron's evaluate.py: such pairs do not count
  }
  for (std::string& g : guesses) g = tasks::msdp_output(g);
  TESSERA_CHECK(guesses.size() == answers.size(), "--guess-file=", f.guess_file, " has ", guesses.size(),
                " lines, --answer-file=", f.answer_file, " has ", answers.size());
  const tasks::PrecisionRecallF1 r = tasks::mean_token_f1(guesses, answers);
  std::printf("Precision: %.4f; recall: %.4f; f1: %.4f\n", r.precision, r.recall, r.f1);
  return 0;
}

// The model input of every test sample.
std::vector<std::string> prompt_inputs(const PromptFlags& f, const std::vector<tasks::DialogueSample>& samples) {
  TESSERA_CHECK(f.prompt_type == "knowledge" || f.prompt_type == "response", "--task MSDP-PROMPT needs --prompt-type");
  TESSERA_CHECK(!f.prompt_file.empty(), "--task MSDP-PROMPT needs --prompt-file");
  std::vector<std::string> inputs;
  if (f.prompt_type == "knowledge") {
    std::map<std::string, std::vector<std::string>> examples;  // the first line of each key, as Megatron
    int64_t number = 0;
    for (const std::string& line : read_lines(f.prompt_file)) {
      ++number;
      json j;
      try {
        j = json::parse(line);
      } catch (const json::exception& e) {
        throw Error(str_cat("--prompt-file=", f.prompt_file, ":", number, ": not JSON: ", e.what()));
      }
      TESSERA_CHECK(j.is_object() && j.size() == 1 && j.begin()->is_array(), "--prompt-file=", f.prompt_file, ":",
                    number, ": expected {\"topic last_turn\": [examples]}");
      examples.emplace(j.begin().key(), j.begin()->get<std::vector<std::string>>());
    }
    for (const tasks::DialogueSample& s : samples) {
      const std::string key = s.topic + " " + s.turns().back();
      auto it = examples.find(key);
      TESSERA_CHECK(it != examples.end(), "--prompt-file=", f.prompt_file, ": no examples for '", key, "'");
      inputs.push_back(tasks::knowledge_generation_input(s, it->second));
    }
  } else {
    std::vector<std::string> examples = read_lines(f.prompt_file);
    examples.resize(std::min<size_t>(examples.size(), static_cast<size_t>(f.num_prompt_examples)));
    for (const tasks::DialogueSample& s : samples) inputs.push_back(tasks::response_generation_input(s, examples));
  }
  return inputs;
}

std::string output_file(const PromptFlags& f) {
  return f.sample_output_file.empty() ? f.sample_input_file + ".out" : f.sample_output_file;
}

// Prints progress every tenth of the samples, with the time left.
void report(size_t done, size_t total, const Timer& timer) {
  if (total == 0 || (done * 10 / total == (done - 1) * 10 / total && done != total)) return;
  const double s = timer.seconds();
  std::cerr << " > " << done << "/" << total << " samples, " << s << " s, about "
            << s / static_cast<double>(done) * static_cast<double>(total - done) << " s left" << std::endl;
}

int prompt_through_api(const PromptFlags& f) {
  TESSERA_CHECK(!f.api_url.empty(), "--api-prompt needs --megatron-api-url");
  const size_t scheme = f.api_url.find("://");
  const size_t path_at = f.api_url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  const std::string host = f.api_url.substr(0, path_at), path = path_at == std::string::npos ? "/api" : f.api_url.substr(path_at);
  httplib::Client client(host);
  client.set_read_timeout(3600, 0);
  TESSERA_CHECK(client.is_valid(), "--megatron-api-url=", f.api_url, ": not a URL this client can reach");
  const std::vector<std::string> inputs = prompt_inputs(f, tasks::read_processed(f.sample_input_file));
  std::vector<std::string> outputs;
  Timer timer;
  for (const std::string& input : inputs) {
    const json body = {{"prompts", {input}}, {"tokens_to_generate", f.out_seq_length}, {"top_k", 1}};
    httplib::Result res = client.Put(path, body.dump(), "application/json; charset=UTF-8");
    TESSERA_CHECK(res, "--megatron-api-url=", f.api_url, ": no answer (", httplib::to_string(res.error()), ")");
    TESSERA_CHECK(res->status == 200, "--megatron-api-url=", f.api_url, ": HTTP ", res->status, ": ", res->body);
    const std::string text = json::parse(res->body).at("text").at(0).get<std::string>();
    outputs.push_back(tasks::msdp_output(text.size() > input.size() ? text.substr(input.size()) : ""));
    report(outputs.size(), inputs.size(), timer);
  }
  write_lines(output_file(f), outputs);
  std::cout << " > " << outputs.size() << " generations to " << output_file(f) << std::endl;
  return 0;
}

}  // namespace

int msdp_command(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "preprocess") return preprocess({args.begin() + 1, args.end()});
  PromptFlags f;
  const bool local = std::find(args.begin(), args.end(), "--load") != args.end();
  if (!local) {  // evaluation, or prompting through a server: no model here
    CLI::App app{"tessera msdp: Megatron's tasks/msdp", "tessera msdp"};
    add_prompt_flags(app, f);
    if (!parse_command_line(app, args, "msdp")) return 0;
    if (f.task == "MSDP-EVAL-F1") return evaluate_f1(f);
    TESSERA_CHECK(f.api_prompt, "--task MSDP-PROMPT needs --load CKPT or --api-prompt --megatron-api-url URL");
    return prompt_through_api(f);
  }
  LoadFlags flags;
  CLI::App app{"tessera msdp: Megatron's tasks/msdp", "tessera msdp"};
  app.option_defaults()->always_capture_default();
  add_load_flags(app, flags);
  add_prompt_flags(app, f);
  return run_on_every_rank(app, args, "msdp", [&](comm::ProcessGroup& world) {
    TESSERA_CHECK(f.task == "MSDP-PROMPT" && !f.api_prompt, "--load goes with --task MSDP-PROMPT without --api-prompt");
    const std::vector<std::string> inputs = prompt_inputs(f, tasks::read_processed(f.sample_input_file));
    infer::LoadedModel model(flags.load, world);
    const data::Tokenizer& tokenizer = model.tokenizer();
    infer::GenerationOptions options;  // greedy, cut at the first newline (so generation may stop there)
    options.sampling.temperature = 0;
    options.sampling.tokens_to_generate = f.out_seq_length;
    options.sampling.eod = tokenizer.eod();
    options.stop_strings = {"\n"};
    std::vector<std::vector<int32_t>> ids;
    for (const std::string& input : inputs) ids.push_back(tokenizer.encode(input));
    Timer timer;
    std::vector<std::string> outputs(inputs.size());
    size_t done = 0;
    // In chunks of --micro-batch-size, for progress.
    for (size_t begin = 0; begin < ids.size(); begin += static_cast<size_t>(f.micro_batch_size)) {
      const size_t end = std::min(ids.size(), begin + static_cast<size_t>(f.micro_batch_size));
      const std::vector<std::vector<int32_t>> chunk(ids.begin() + begin, ids.begin() + end);
      const std::vector<infer::Generation> gen = infer::generate(model.runner(), chunk, options, &tokenizer, {}, f.micro_batch_size);
      for (size_t i = 0; i < gen.size(); ++i) {
        std::span<const int32_t> all(gen[i].tokens);
        outputs[begin + i] = tasks::msdp_output(infer::continuation_text(tokenizer, chunk[i], all.subspan(gen[i].prompt_length)));
      }
      done = end;
      if (world.rank() == 0) report(done, ids.size(), timer);
    }
    if (world.rank() != 0) return;
    write_lines(output_file(f), outputs);
    std::cout << " > " << outputs.size() << " generations to " << output_file(f) << std::endl;
  }, &flags);
}

}  // namespace tessera::apps
