#include "tasks/finetune_lm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "ckpt/checkpoint.h"
#include "core/check.h"
#include "model/model_factory.h"
#include "train/args/argument_rules.h"
#include "train/step_context.h"

namespace tessera::tasks {
namespace {

using train::rules::require;

std::vector<TokenizedPair> tokenize_file(const std::string& path, const std::string& task,
                                         const data::Tokenizer& tokenizer, int64_t seq_length,
                                         const std::function<void(const std::string&)>& say) {
  const std::vector<tasks::PromptTarget> pairs =
      tasks::read_cntrl_pairs(path, task == "CNTRL-KEYWORDS" ? "keywords" : "generator");
  std::vector<TokenizedPair> out;
  int64_t cut = 0;
  for (const tasks::PromptTarget& p : pairs) {
    out.push_back(tokenize_pair(p, tokenizer, seq_length));
    cut += out.back().target_start < static_cast<int64_t>(tokenizer.encode(p.prompt).size()) ? 1 : 0;
  }
  say(str_cat("   > ", path, ": ", out.size(), " prompt and target pairs, ", cut, " with the prompt's start cut"));
  return out;
}

}  // namespace

TokenizedPair tokenize_pair(const tasks::PromptTarget& pair, const data::Tokenizer& tokenizer, int64_t seq_length) {
  std::vector<int32_t> prompt = tokenizer.encode(pair.prompt), target = tokenizer.encode(pair.target);
  target.push_back(tokenizer.eod());
  const auto room = static_cast<size_t>(seq_length + 1);
  // The target keeps at least half the room; the prompt the end that fits.
  if (target.size() > room - std::min(prompt.size(), room / 2)) target.resize(room - std::min(prompt.size(), room / 2));
  if (prompt.size() + target.size() > room)
    prompt.erase(prompt.begin(), prompt.end() - static_cast<std::ptrdiff_t>(room - target.size()));
  TokenizedPair out{prompt, static_cast<int64_t>(prompt.size())};
  out.ids.insert(out.ids.end(), target.begin(), target.end());
  return out;
}

model::MicroBatch prompt_target_micro_batch(const std::vector<TokenizedPair>& pairs, std::span<const int64_t> indices,
                                            int64_t seq_length, int32_t pad) {
  TESSERA_CHECK(!indices.empty(), "an empty micro-batch of prompt and target pairs");
  const auto rows = static_cast<int64_t>(indices.size());
  model::MicroBatch mb;
  mb.tokens = Tensor::empty({rows, seq_length}, DType::I32);
  mb.labels = Tensor::empty({rows, seq_length}, DType::I32);
  mb.loss_mask = Tensor::zeros({rows, seq_length}, DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    const TokenizedPair& p = pairs.at(static_cast<size_t>(indices[r]));
    const auto n = static_cast<int64_t>(p.ids.size());
    TESSERA_CHECK(n >= 2 && n <= seq_length + 1, "a prompt and target pair of ", n, " ids for --seq-length ",
                  seq_length);
    for (int64_t j = 0; j < seq_length; ++j) {
      const bool real = j + 1 < n;
      mb.tokens.host_i32()[r * seq_length + j] = j < n ? p.ids[static_cast<size_t>(j)] : pad;
      mb.labels.host_i32()[r * seq_length + j] = real ? p.ids[static_cast<size_t>(j + 1)] : pad;
      if (real && j + 1 >= p.target_start) mb.loss_mask.host_f32()[r * seq_length + j] = 1.0f;
    }
  }
  return mb;
}

FinetuneResult finetune_conditional_lm(const FinetuneArguments& a,
                                       const std::function<void(const std::string&)>& say) {
  validate(a);
  const nlohmann::json recorded = ckpt::latest_checkpoint_args(a.pretrained_checkpoint);
  TESSERA_CHECK(recorded.contains("model"), "--pretrained-checkpoint=", a.pretrained_checkpoint,
                ": the checkpoint does not record its model configuration");
  model::ModelConfig config = model::config_from_json(recorded.at("model"));
  TESSERA_CHECK(config.family == "gpt", "--pretrained-checkpoint=", a.pretrained_checkpoint, ": holds a '",
                config.family, "' model, not a GPT");
  config.hidden_dropout = a.hidden_dropout;
  config.attention_dropout = a.attention_dropout;
  if (a.seq_length > 0) config.seq_length = a.seq_length;
  require(config.position_embedding != model::PositionEmbedding::LearnedAbsolute ||
              config.seq_length <= config.max_position_embeddings,
          "--seq-length", config.seq_length,
          str_cat("must be at most the pretrained model's --max-position-embeddings=", config.max_position_embeddings));
  const data::TokenizerOptions tokenizer_options =
      finetune_tokenizer_options(a, recorded, ckpt::latest_tokenizer_files(a.pretrained_checkpoint));
  const std::unique_ptr<data::Tokenizer> tokenizer = data::build_tokenizer(tokenizer_options);
  TESSERA_CHECK(tokenizer->vocab_size() == config.vocab_size, "--tokenizer-type ", tokenizer_options.type,
                " has ", tokenizer->vocab_size(), " ids but the pretrained model was trained with ", config.vocab_size);
  const int64_t seq = config.seq_length;
  const int32_t pad = tokenizer->eod();

  say(str_cat(" > building ", a.task, " datasets:"));
  std::vector<TokenizedPair> train;
  for (const std::string& path : a.epochs > 0 ? a.train_data : std::vector<std::string>{}) {
    std::vector<TokenizedPair> part = tokenize_file(path, a.task, *tokenizer, seq, say);
    train.insert(train.end(), part.begin(), part.end());
  }
  std::vector<std::pair<std::string, std::vector<TokenizedPair>>> valid;
  for (const std::string& path : a.valid_data)
    valid.emplace_back(std::filesystem::path(path).stem().string(), tokenize_file(path, a.task, *tokenizer, seq, say));
  const int64_t mbs = a.micro_batch_size, n = static_cast<int64_t>(train.size());
  const int64_t iters_per_epoch = finetune_iters_per_epoch(a, n, "pairs");

  say(str_cat("building GPT model for ", a.task, " ..."));
  model::ParameterSet params;
  const std::unique_ptr<model::LanguageModelChunk> net = model::build_model_chunk(config, params);
  params.allocate(a.seed);
  say(str_cat(" > number of parameters: ", params.numel()));
  load_pretrained_and_report(a, params, nullptr, say);
  optim::AdamWOptimizer optimizer(params, a.adam);

  FinetuneResult result;
  // Megatron's validation line per file: the mean loss over the target tokens.
  auto evaluate = [&](int64_t epoch, int64_t iteration) {
    double total_loss = 0, total_tokens = 0;
    for (const auto& [name, pairs] : valid) {
      double loss = 0, tokens = 0;
      std::vector<int64_t> indices;
      for (int64_t first = 0; first < static_cast<int64_t>(pairs.size()); first += mbs) {
        indices.resize(static_cast<size_t>(std::min<int64_t>(mbs, static_cast<int64_t>(pairs.size()) - first)));
        std::iota(indices.begin(), indices.end(), first);
        const model::MicroBatch mb = prompt_target_micro_batch(pairs, indices, seq, pad);
        const int64_t rows = mb.tokens.dim(0);
        const model::ForwardContext ctx =
            train::micro_batch_context(a.seed, iteration, /*training=*/false, 0, seq, rows);
        const Tensor scores = net->score(mb, Tensor(), ctx);  // per [seq, batch] row
        for (int64_t s = 0; s < seq; ++s)
          for (int64_t r = 0; r < rows; ++r) {
            const float m = mb.loss_mask.host_f32()[r * seq + s];
            const int64_t row = s * rows + r;
            loss += m * (scores.host_f32()[3 * row + 1] - scores.host_f32()[3 * row]);
          }
        tokens += train::loss_tokens(mb);
      }
      const double mean = loss / std::max(tokens, 1.0);
      char line[512];
      std::snprintf(line, sizeof line, " validation loss at epoch %lld on %s | lm loss value: %.6E | lm loss PPL: %.6E | ",
                    static_cast<long long>(epoch), name.c_str(), mean, std::exp(std::min(20.0, mean)));
      say(line);
      total_loss += loss;
      total_tokens += tokens;
    }
    if (!valid.empty()) result.valid_losses.push_back(total_loss / std::max(total_tokens, 1.0));
  };

  auto step_for = [&](std::span<const int64_t> examples, int64_t first) {
    FinetuneStep s;
    s.mb = prompt_target_micro_batch(train, examples, seq, pad);
    s.sample_offset = first;
    s.seq = seq;
    s.rows = s.logged_rows = static_cast<int64_t>(examples.size());
    s.normalizer = train::loss_tokens(s.mb);  // the objective is the mean over the micro-batch's target tokens
    return s;
  };
  auto save = [&](int64_t iteration) {
    nlohmann::json args = recorded;
    args["model"] = model::to_json(config);
    args["tokenizer_type"] = tokenizer_options.type;
    args["vocab_file"] = tokenizer_options.vocab_file;
    args["merge_file"] = tokenizer_options.merge_file;
    args["tokenizer_model"] = tokenizer_options.tokenizer_model;
    args["task"] = a.task;
    args["micro_batch_size"] = mbs;
    args["lr"] = a.lr;
    args["seed"] = a.seed;
    ckpt::save_checkpoint(a.save, {iteration, iteration * mbs, 0, a.seed, args, nlohmann::json(), -1,
                                   tokenizer_files(tokenizer_options)}, params, &optimizer);
  };
  result.losses = run_finetune_epochs(a, config, n, iters_per_epoch, params, *net, optimizer, step_for, save,
                                      evaluate, say);
  return result;
}

}  // namespace tessera::tasks
