// `tessera convert`: checkpoints to and from Hugging Face model directories, with the flags of
// Megatron-LM's tools/checkpoint/convert.py:
//   tessera convert --loader tessera --saver hf --load-dir CKPT --save-dir HF [--max-shard-size 5GB]
//   tessera convert --loader hf --saver tessera --load-dir HF --save-dir CKPT
//   tessera convert --loader megatron --load-dir MEGATRON_CKPT --save-dir CKPT [--ckpt-step N] [model flags]
//       (legacy torch or torch_dist, told apart by the iteration directory)
//   tessera convert --loader tessera --saver megatron --load-dir CKPT --save-dir MEGATRON_CKPT
//       [--target-tensor-parallel-size T --target-pipeline-parallel-size P --megatron-names mcore|legacy]
//       [--ckpt-format torch|torch_dist]
// and the hidden `tessera debug-forward`, which writes a checkpoint's logits and loss gradients on
// given tokens for the parity tests against the PyTorch references (tests/hf_parity.sh, for Mixtral
// tests/hf_mixtral_parity.sh, for BERT tests/hf_bert_parity.sh).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <unistd.h>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hf_convert.h"
#include "ckpt/megatron_dist.h"
#include "ckpt/megatron_dist_saver.h"
#include "ckpt/megatron_legacy.h"
#include "ckpt/megatron_resume.h"
#include "ckpt/megatron_saver.h"
#include "ckpt/safetensors.h"
#include "data/tokenizer_factory.h"
#include "model/bert_model.h"
#include "model/gpt_model.h"
#include "train/args/arguments.h"

namespace tessera::apps {
namespace {
namespace fs = std::filesystem;

// "5GB", "500MB", "5GiB", "2000000": bytes, as transformers' convert_file_size_to_int reads
// max_shard_size: the unit in any case, binary units KiB/MiB/GiB, and a lower-case final "b" (5Gb)
// counting bits.
int64_t parse_size(const std::string& s) {
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = s.substr(used);
  const bool bits = unit.size() == 2 && unit[1] == 'b';
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const int64_t scale = unit.empty() || unit == "B" ? 1
                        : unit == "KB"             ? 1000
                        : unit == "MB"             ? 1000000
                        : unit == "GB"             ? 1000000000
                        : unit == "KIB"            ? int64_t{1} << 10
                        : unit == "MIB"            ? int64_t{1} << 20
                        : unit == "GIB"            ? int64_t{1} << 30
                                                   : 0;
  TESSERA_CHECK(used > 0 && n > 0 && scale > 0 && n <= INT64_MAX / scale, "--max-shard-size '", s,
                "': expected a positive size such as 5GB, 500MB, 5GiB or 1000000");
  return std::max<int64_t>(1, bits ? n * scale / 8 : n * scale);
}

// debug-forward's file: `outs`, then the gradients as grad.<name>, under Hugging Face's names where the model
// has an HF equivalent; else (a Llama-style MoE with a shared expert or sigmoid routing, say) under
// Tessera's own, so that the loss is still written.
void write_debug_outputs(const model::ModelConfig& config, const std::map<std::string, Tensor>& grads,
                         std::vector<std::pair<std::string, Tensor>> outs, const std::string& out) {
  std::map<std::string, Tensor> named;
  try {
    named = ckpt::to_hugging_face_layout(config, grads);
  } catch (const Error&) {
    named = grads;
  }
  for (auto& [name, g] : named) outs.emplace_back("grad." + name, g);
  ckpt::write_safetensors(out, outs);
}

// BERT's debug-forward: a batch of `batch` samples, flat [batch, seq] ids. Writes the MLM logits
// [batch, seq, padded vocab], the sentence-order logits [batch, 2] (with the binary head), the loss
// (mean MLM loss over the labelled positions + mean sentence-order loss) and its gradients in Hugging Face
// layout.
struct BertInputs {
  int64_t batch = 1;
  std::vector<int32_t> token_types, padding_mask, labels, sentence_order;
};

int bert_debug_forward(const model::ModelConfig& config, const std::string& load, const std::vector<int32_t>& tokens,
                       const BertInputs& in, const std::string& out) {
  const int64_t b = in.batch, n = static_cast<int64_t>(tokens.size());
  TESSERA_CHECK(b >= 1 && n % b == 0, "--tokens: ", n, " ids are not --batch-size ", b, " equal samples");
  const int64_t s = n / b;
  auto flat = [&](const std::vector<int32_t>& v, const char* flag, int64_t size, bool required) {
    TESSERA_CHECK(static_cast<int64_t>(v.size()) == size || (v.empty() && !required), flag, ": ", v.size(),
                  " values, expected ", size);
  };
  flat(in.token_types, "--token-types", n, config.bert_binary_head);
  flat(in.padding_mask, "--padding-mask", n, false);
  flat(in.labels, "--labels", n, true);
  flat(in.sentence_order, "--sentence-order", b, config.bert_binary_head);

  model::ParameterSet params;
  model::BertModel bert(config, params);
  params.allocate(0);
  ckpt::load_checkpoint(load, params, nullptr);

  model::MicroBatch mb;
  auto ints = [](const Shape& shape, const std::vector<int32_t>& v, int32_t fill) {
    Tensor t = Tensor::empty(shape, DType::I32);
    for (int64_t i = 0; i < t.numel(); ++i) t.host_i32()[i] = v.empty() ? fill : v[i];
    return t;
  };
  mb.tokens = ints({b, s}, tokens, 0);
  mb.padding_mask = ints({b, s}, in.padding_mask, 1);
  if (config.bert_binary_head) {
    mb.token_types = ints({b, s}, in.token_types, 0);
    mb.sentence_order = ints({b}, in.sentence_order, 0);
  }
  mb.labels = Tensor::empty({b, s}, DType::I32);
  mb.loss_mask = Tensor::empty({b, s});
  double labelled = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool scored = in.labels[i] >= 0;  // -1: not a masked position
    mb.labels.host_i32()[i] = scored ? in.labels[i] : 0;
    mb.loss_mask.host_f32()[i] = scored ? 1.0f : 0.0f;
    labelled += scored ? 1 : 0;
  }
  TESSERA_CHECK(labelled > 0, "--labels: no position is labelled (all -1)");
  model::ForwardContext ctx{0, 1, 0, /*training=*/false, s, b};
  // The trainer's weighting: every loss is divided by the labelled tokens, the per-sample one times
  // tokens per sample, so the objective is mean MLM loss + mean sentence-order loss.
  ctx.per_sample_loss_weight = labelled / static_cast<double>(b);
  std::unique_ptr<model::ChunkRecord> record = bert.make_record();
  model::LossSums losses;
  bert.forward(mb, Tensor(), ctx, *record, losses);
  auto& rec = static_cast<model::BertActivations&>(*record);
  // Logits rows are [seq, batch]; the file has them [batch, seq, vocab].
  const int64_t v = rec.logits.dim(1);
  Tensor logits = Tensor::empty({b, s, v});
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < b; ++j)
      std::copy(rec.logits.host_f32() + (i * b + j) * v, rec.logits.host_f32() + (i * b + j + 1) * v,
                logits.host_f32() + (j * s + i) * v);
  std::vector<std::pair<std::string, Tensor>> outs{{"mlm_logits", logits}};
  if (config.bert_binary_head) outs.emplace_back("binary_logits", rec.binary_logits.clone());
  double total = losses.lm;
  for (const auto& [name, value] : losses.auxiliary) total += value;
  Tensor loss = Tensor::empty({1});
  loss.host_f32()[0] = static_cast<float>(total / labelled);
  outs.emplace_back("loss", loss);

  params.zero_grad();
  bert.backward(rec, Tensor(), ctx, static_cast<float>(1.0 / labelled));
  std::map<std::string, Tensor> grads;
  for (const model::Parameter& p : params.params()) grads[p.spec.name] = p.grad;
  write_debug_outputs(config, grads, outs, out);
  return 0;
}

// --save-dir: a new or empty directory, or with --overwrite one whose contents are replaced. A converter
// never writes beside what is there: into a checkpoint it would add an iteration and move the tracker
// (train --load then resumes the converted weights), into another export it would mix two models.
void check_save_dir(const fs::path& dir, const fs::path& load_dir, bool overwrite) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  TESSERA_CHECK(fs::is_directory(dir, ec), "--save-dir=", dir.string(), ": is a file, not a directory");
  TESSERA_CHECK(!fs::equivalent(dir, load_dir, ec), "--save-dir=", dir.string(), ": is --load-dir; write elsewhere");
  if (overwrite) return;
  std::vector<std::string> entries;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) entries.push_back(e.path().filename().string());
  if (entries.empty()) return;
  std::sort(entries.begin(), entries.end());
  std::string held;
  for (size_t i = 0; i < entries.size() && i < 4; ++i) held += (i ? ", " : "") + entries[i];
  if (entries.size() > 4) held += str_cat(" and ", entries.size() - 4, " more");
  throw Error(str_cat("--save-dir=", dir.string(), ": is not empty (it holds ", held, "); give a new or empty "
                      "directory, or --overwrite to replace what is there"));
}

// Converts into a fresh directory beside --save-dir and swaps it into place when complete, so a failed
// conversion leaves --save-dir as it was, and --overwrite never mixes the old contents with the new.
void convert_into(const fs::path& dir, const std::function<void(const std::string&)>& write) {
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(parent, ec);
  TESSERA_CHECK(!ec, "--save-dir=", dir.string(), ": cannot create its parent directory: ", ec.message());
  const std::string name = dir.filename().string();
  const fs::path staging = parent / str_cat(".", name, ".converting.", ::getpid());
  const fs::path previous = parent / str_cat(".", name, ".replaced.", ::getpid());
  fs::remove_all(staging);
  try {
    fs::create_directories(staging);
    write(staging.string());
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
  if (fs::exists(dir)) fs::rename(dir, previous);
  fs::rename(staging, dir);
  fs::remove_all(previous, ec);
}

// The flags of `tessera convert`; the model flags of `tessera train` are there for --loader megatron,
// whose checkpoint's args they override.
struct ConvertFlags {
  std::string loader, saver, load_dir, save_dir, max_shard = "5GB";
  bool overwrite = false;
  int64_t ckpt_step = -1;
  // --saver megatron: the layout written (Megatron's tools/checkpoint flag names) and the key names.
  int64_t target_tp = 1, target_pp = 1, target_ep = 1;
  std::string megatron_names = "mcore";
  std::string ckpt_format = "torch";  // Megatron's --ckpt-format: torch (legacy) or torch_dist
};

CLI::App* add_convert_flags(CLI::App& app, ConvertFlags& f, train::TrainArguments& model) {
  app.option_defaults()->always_capture_default();
  app.add_option("--loader", f.loader, "Format read: tessera, hf or megatron (Megatron-LM's checkpoints: legacy torch or torch_dist)")
      ->required()->check(CLI::IsMember({"tessera", "hf", "megatron"}));
  app.add_option("--saver", f.saver,
                 "Format written: hf, megatron (Megatron-LM's checkpoint of a GPT, BERT or MoE: legacy torch, or torch_dist "
                 "with --ckpt-format) or "
                 "tessera (--loader megatron: tessera, the default)")
      ->check(CLI::IsMember({"tessera", "hf", "megatron"}));
  app.add_option("--load-dir", f.load_dir, "Checkpoint (its latest iteration) or Hugging Face directory to read")->required();
  app.add_option("--save-dir", f.save_dir, "Directory to write")->required();
  app.add_option("--max-shard-size", f.max_shard, "Largest safetensors file written for hf (e.g. 5GB, 500MB)");
  app.add_flag("--overwrite", f.overwrite, "Replace what --save-dir holds (without it, it must be new or empty)");
  app.add_option("--ckpt-step", f.ckpt_step,
                 "--loader megatron: the iteration to read (default: latest_checkpointed_iteration.txt's)")
      ->check(CLI::NonNegativeNumber)
      ->default_str("latest");
  app.add_option("--target-tensor-parallel-size", f.target_tp, "--saver megatron: the tensor-parallel size written")
      ->check(CLI::PositiveNumber);
  app.add_option("--target-expert-parallel-size", f.target_ep,
                 "--saver megatron: the expert-parallel size written (a mixture of experts)")
      ->check(CLI::PositiveNumber);
  app.add_option("--target-pipeline-parallel-size", f.target_pp,
                 "--saver megatron: the pipeline-parallel size written (layers split evenly)")
      ->check(CLI::PositiveNumber);
  app.add_option("--megatron-names", f.megatron_names,
                 "--saver megatron: mcore (Megatron-Core's local-spec keys) or legacy (language_model.*)")
      ->check(CLI::IsMember({"mcore", "legacy"}));
  app.add_option("--ckpt-format", f.ckpt_format,
                 "--saver megatron: torch (the legacy mp_rank_* files) or torch_dist (PyTorch DCP, Megatron's default)")
      ->check(CLI::IsMember({"torch", "torch_dist"}));
  CLI::App* group = app.add_option_group(
      "model", "--loader megatron: model flags of tessera train, which override the checkpoint's saved args");
  group->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train::add_model_flags(*group, model);
  return group;
}

// The model flags given on the command line, as "--hidden-size, --swiglu".
std::string given_model_flags(const CLI::App& group) {
  std::string given;
  for (const CLI::Option* o : group.get_options())
    if (o->count() > 0) given += (given.empty() ? "" : ", ") + o->get_name();
  return given;
}

// The MoE flags of tessera train that give back the saved args' experts (finalize_model derives the
// config's experts, router and policies from these, so they must say what the checkpoint holds).
void set_megatron_moe_flags(const model::MoeConfig& m, train::TrainArguments& a) {
  if (!m.enabled()) return;
  a.num_experts.clear();
  a.moe_layer_freq = "[";
  for (size_t l = 0; l < m.layer_experts.size(); ++l) {
    a.moe_layer_freq += str_cat(l ? "," : "", m.layer_experts[l] > 0 ? 1 : 0);
    if (m.layer_experts[l] > 0) a.num_experts.push_back(m.layer_experts[l]);
  }
  a.moe_layer_freq += "]";
  a.moe_router_score_function = m.router.score == kernels::RouterScoreFunction::Sigmoid ? "sigmoid" : "softmax";
  a.moe_router_load_balancing_type = m.load_balancing == model::LoadBalancing::None         ? "none"
                                     : m.load_balancing == model::LoadBalancing::SeqAuxLoss ? "seq_aux_loss"
                                                                                            : "aux_loss";
  a.moe_token_drop_policy = m.token_drop_policy == kernels::TokenDropPolicy::Position ? "position" : "probs";
}

// --loader megatron: finds the checkpoint's format (legacy torch or torch_dist), reads its args, then the
// command line again over them (flags win), and converts.
void convert_megatron(const std::vector<std::string>& args, const ConvertFlags& first, const fs::path& target) {
  const ckpt::MegatronIteration found = ckpt::find_megatron_iteration(first.load_dir, first.ckpt_step);
  const bool dist = ckpt::megatron_checkpoint_format(found) == "torch_dist";
  ckpt::MegatronLegacyCheckpoint legacy;
  ckpt::MegatronDistCheckpoint distributed;
  if (dist) distributed = ckpt::open_megatron_dist(first.load_dir, first.ckpt_step);
  else legacy = ckpt::open_megatron_legacy(first.load_dir, first.ckpt_step);
  const ckpt::MegatronArgs& saved = dist ? distributed.args : legacy.args;
  train::TrainArguments model;
  model.model = saved.config;
  model.group_query_attention = saved.group_query_attention;
  model.make_vocab_size_divisible_by = saved.make_vocab_size_divisible_by;
  set_megatron_moe_flags(saved.config.moe, model);
  if (saved.config.mla.enabled) model.rope_type = saved.config.mla.yarn ? "yarn" : "rope";  // finalize reads the flag
  ConvertFlags f;
  CLI::App app{"tessera convert", "tessera convert"};
  CLI::App* group = add_convert_flags(app, f, model);
  parse_command_line(app, args, "convert");
  const std::string given = given_model_flags(*group);
  train::finalize_model(model);  // the rules of the flags, over the checkpoint's values
  std::vector<std::string> notes = saved.notes;
  if (!given.empty()) notes.push_back("the model flags given (" + given + ") override the checkpoint's args");
  ckpt::resolve_megatron_vocab_size(saved, model.model, notes);
  for (const std::string& n : notes) std::cerr << " > note: " << n << std::endl;
  convert_into(target, [&](const std::string& out) {
    for (const std::string& n : dist ? ckpt::import_megatron_dist(distributed, model.model, out)
                                     : ckpt::import_megatron_legacy(std::move(legacy), model.model, out))
      std::cerr << " > note: " << n << std::endl;
  });
}

}  // namespace

int convert_command(const std::vector<std::string>& args) {
  ConvertFlags f;
  train::TrainArguments model;
  CLI::App app{"tessera convert: Tessera checkpoints to and from Hugging Face (GPT2LMHeadModel, LlamaForCausalLM, "
               "MixtralForCausalLM, BertForPreTraining, MegatronBertForPreTraining, and their ForMaskedLM), and "
               "Megatron-LM's checkpoints (GPT, BERT, MoE; legacy torch and torch_dist in, legacy torch out) to and "
               "from Tessera",
               "tessera convert"};
  CLI::App* group = add_convert_flags(app, f, model);
  if (!parse_command_line(app, args, "convert")) return 0;
  if (f.saver.empty()) {
    TESSERA_CHECK(f.loader == "megatron", "--saver is required with --loader ", f.loader);
    f.saver = "tessera";
  }
  TESSERA_CHECK(f.loader != f.saver, "--loader ", f.loader, " and --saver ", f.saver, ": nothing to convert");
  fs::path target = fs::absolute(f.save_dir).lexically_normal();  // "out/" and "./out" name the directory out
  if (target.filename().empty()) target = target.parent_path();
  if (f.loader == "megatron") {
    TESSERA_CHECK(f.saver == "tessera", "--loader megatron --saver ", f.saver, ": Megatron checkpoints convert to "
                  "tessera; convert that to ", f.saver, " with a second tessera convert");
    TESSERA_CHECK(f.target_tp == 1 && f.target_pp == 1 && f.target_ep == 1 && f.megatron_names == "mcore" &&
                      f.ckpt_format == "torch",
                  "--target-tensor-parallel-size, --target-pipeline-parallel-size, --target-expert-parallel-size, "
                  "--megatron-names and --ckpt-format apply to --saver megatron only (a Tessera checkpoint is "
                  "resharded by train --load; the loader tells the formats apart)");
    check_save_dir(target, f.load_dir, f.overwrite);
    convert_megatron(args, f, target);
    std::cout << "converted " << f.load_dir << " (megatron) to " << f.save_dir << " (tessera)" << std::endl;
    return 0;
  }
  const std::string given = given_model_flags(*group);
  TESSERA_CHECK(given.empty(), given, ": model flags apply to --loader megatron only (a Tessera or Hugging Face "
                "checkpoint records its model)");
  TESSERA_CHECK(f.ckpt_step < 0, "--ckpt-step: applies to --loader megatron only");
  const bool to_megatron = f.saver == "megatron";
  TESSERA_CHECK(to_megatron || (f.target_tp == 1 && f.target_pp == 1 && f.target_ep == 1 && f.megatron_names == "mcore" &&
                                f.ckpt_format == "torch"),
                "--target-tensor-parallel-size, --target-pipeline-parallel-size, --target-expert-parallel-size, "
                "--megatron-names and --ckpt-format apply to --saver megatron only");
  TESSERA_CHECK(!to_megatron || f.loader == "tessera", "--saver megatron: converts from --loader tessera (convert ",
                f.loader, " to tessera first)");
  const int64_t shard_bytes = parse_size(f.max_shard);
  check_save_dir(target, f.load_dir, f.overwrite);
  convert_into(target, [&](const std::string& out) {
    if (f.saver == "hf") {
      ckpt::export_hugging_face(f.load_dir, out, shard_bytes);
    } else if (to_megatron) {
      const bool dist = f.ckpt_format == "torch_dist";
      const ckpt::MegatronSaveOptions options{f.target_tp, f.target_pp, f.target_ep, f.megatron_names == "legacy", dist};
      for (const std::string& n : dist ? ckpt::export_megatron_dist(f.load_dir, out, options)
                                       : ckpt::export_megatron_legacy(f.load_dir, out, options))
        std::cerr << " > note: " << n << std::endl;
    } else {
      ckpt::import_hugging_face(f.load_dir, out);
    }
  });
  std::cout << "converted " << f.load_dir << " (" << f.loader << ") to " << f.save_dir << " (" << f.saver << ")" << std::endl;
  return 0;
}

int debug_forward_command(const std::vector<std::string>& args) {
  std::string load, out;
  std::vector<int32_t> tokens;
  CLI::App app{"tessera debug-forward: logits and loss gradients of a checkpoint on tokens (for parity tests)",
               "tessera debug-forward"};
  app.add_option("--load", load, "Checkpoint directory")->required();
  app.add_option("--tokens", tokens,
                 "Token ids. GPT: the model reads all but the last and predicts all but the first; BERT: "
                 "--batch-size samples of equal length, one after the other")
      ->required()->delimiter(',');
  app.add_option("--out", out, "safetensors file to write: logits, loss and the gradients in Hugging Face layout")
      ->required();
  BertInputs bert;
  app.add_option("--batch-size", bert.batch, "BERT: samples in --tokens");
  app.add_option("--token-types", bert.token_types, "BERT: a token type (0/1) per id")->delimiter(',');
  app.add_option("--padding-mask", bert.padding_mask, "BERT: 1 on tokens, 0 on padding, per id (default all 1)")
      ->delimiter(',');
  app.add_option("--labels", bert.labels, "BERT: the masked-LM label per id, -1 where not predicted")->delimiter(',');
  app.add_option("--sentence-order", bert.sentence_order, "BERT: the sentence-order label (0/1) per sample")
      ->delimiter(',');
  if (!parse_command_line(app, args, "debug-forward")) return 0;
  {
    nlohmann::json run = ckpt::latest_checkpoint_args(load);
    TESSERA_CHECK(run.contains("model"), "checkpoint in ", load, " does not record its model configuration");
    const model::ModelConfig config = model::config_from_json(run["model"]);
    if (config.family == "bert") return bert_debug_forward(config, load, tokens, bert, out);
  }
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;
  TESSERA_CHECK(n >= 1, "--tokens: need at least two ids");

  nlohmann::json run = ckpt::latest_checkpoint_args(load);
  TESSERA_CHECK(run.contains("model"), "checkpoint in ", load, " does not record its model configuration");
  model::ModelConfig config = model::config_from_json(run["model"]);
  model::ParameterSet params;
  model::GptModel gpt(config, params);
  params.allocate(0);
  ckpt::load_checkpoint(load, params, nullptr);

  model::MicroBatch mb;
  mb.tokens = Tensor::empty({1, n}, DType::I32);
  mb.labels = Tensor::empty({1, n}, DType::I32);
  mb.loss_mask = Tensor::empty({1, n});
  for (int64_t i = 0; i < n; ++i) {
    mb.tokens.host_i32()[i] = tokens[i];
    mb.labels.host_i32()[i] = tokens[i + 1];
    mb.loss_mask.host_f32()[i] = 1.0f;
  }
  model::ForwardContext ctx{0, 1, 0, /*training=*/false, n, 1};
  // The trainer's weighting (n loss tokens in the one sample): an MoE router's losses then enter the
  // objective, and its gradient, as in training (each layer's load-balancing loss times its coefficient).
  ctx.per_sample_loss_weight = static_cast<double>(n);
  model::GptActivations rec;
  model::LossSums losses;
  gpt.forward(mb, Tensor(), ctx, rec, losses);
  Tensor logits = rec.logits.clone();
  params.zero_grad();
  gpt.backward(rec, ctx, static_cast<float>(1.0 / static_cast<double>(n)));  // gradient of the mean loss

  std::map<std::string, Tensor> grads;
  for (const model::Parameter& p : params.params()) grads[p.spec.name] = p.grad;
  std::vector<std::pair<std::string, Tensor>> outs{{"logits", logits}};
  auto scalar = [&](const std::string& name, double sum) {
    Tensor t = Tensor::empty({1});
    t.host_f32()[0] = static_cast<float>(sum / static_cast<double>(n));
    outs.emplace_back(name, t);
  };
  scalar("loss", losses.lm);  // the mean LM loss
  // The auxiliary losses as the trainer logs them (MoE: averaged over the layers, without coefficients).
  for (const auto& [name, sum] : losses.auxiliary) scalar("aux." + name, sum);
  write_debug_outputs(config, grads, outs, out);
  return 0;
}

}  // namespace tessera::apps
