// `tessera convert`: checkpoints to and from Hugging Face model directories, with the flags of
// Megatron-LM's tools/checkpoint/convert.py:
//   tessera convert --loader tessera --saver hf --load-dir CKPT --save-dir HF [--max-shard-size 5GB]
//   tessera convert --loader hf --saver tessera --load-dir HF --save-dir CKPT
// and the hidden `tessera debug-forward`, which writes a checkpoint's logits and loss gradients on
// given tokens for the parity test against the PyTorch reference (tests/hf_parity.sh).
#include <iostream>

#include "apps/command_line.h"
#include "apps/commands.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hf_convert.h"
#include "ckpt/safetensors.h"
#include "model/gpt_model.h"

namespace tessera::apps {
namespace {

// "5GB", "500MB", "2000000": bytes (decimal units, as Hugging Face's max_shard_size).
int64_t parse_size(const std::string& s) {
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = s.substr(used);
  int64_t scale = unit.empty() || unit == "B" ? 1 : unit == "KB" ? 1000 : unit == "MB" ? 1000000 : unit == "GB" ? 1000000000 : 0;
  TESSERA_CHECK(used > 0 && n > 0 && scale > 0, "--max-shard-size '", s, "': expected a positive size such as 5GB, 500MB or 1000000");
  return n * scale;
}

}  // namespace

int convert_command(const std::vector<std::string>& args) {
  std::string loader, saver, load_dir, save_dir, max_shard = "5GB";
  CLI::App app{"tessera convert: Tessera checkpoints to and from Hugging Face (GPT2LMHeadModel, LlamaForCausalLM)",
               "tessera convert"};
  app.option_defaults()->always_capture_default();
  app.add_option("--loader", loader, "Format read: tessera or hf")->required()->check(CLI::IsMember({"tessera", "hf"}));
  app.add_option("--saver", saver, "Format written: hf or tessera")->required()->check(CLI::IsMember({"tessera", "hf"}));
  app.add_option("--load-dir", load_dir, "Checkpoint (its latest iteration) or Hugging Face directory to read")->required();
  app.add_option("--save-dir", save_dir, "Directory to write")->required();
  app.add_option("--max-shard-size", max_shard, "Largest safetensors file written for hf (e.g. 5GB, 500MB)");
  if (!parse_command_line(app, args, "convert")) return 0;
  TESSERA_CHECK(loader != saver, "--loader ", loader, " and --saver ", saver, ": nothing to convert");
  if (saver == "hf")
    ckpt::export_hugging_face(load_dir, save_dir, parse_size(max_shard));
  else
    ckpt::import_hugging_face(load_dir, save_dir);
  std::cout << "converted " << load_dir << " (" << loader << ") to " << save_dir << " (" << saver << ")" << std::endl;
  return 0;
}

int debug_forward_command(const std::vector<std::string>& args) {
  std::string load, out;
  std::vector<int32_t> tokens;
  CLI::App app{"tessera debug-forward: logits and loss gradients of a checkpoint on tokens (for parity tests)",
               "tessera debug-forward"};
  app.add_option("--load", load, "Checkpoint directory")->required();
  app.add_option("--tokens", tokens, "Token ids: the model reads all but the last and predicts all but the first")
      ->required()->delimiter(',');
  app.add_option("--out", out, "safetensors file to write: logits, loss and the gradients in Hugging Face layout")
      ->required();
  if (!parse_command_line(app, args, "debug-forward")) return 0;
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
    mb.tokens.i32()[i] = tokens[i];
    mb.labels.i32()[i] = tokens[i + 1];
    mb.loss_mask.f32()[i] = 1.0f;
  }
  model::ForwardContext ctx{0, 1, 0, /*training=*/false, n, 1};
  model::GptActivations rec;
  const double loss_sum = gpt.forward(mb, ctx, rec);
  Tensor logits = rec.logits.clone();
  params.zero_grad();
  gpt.backward(rec, ctx, static_cast<float>(1.0 / static_cast<double>(n)));  // gradient of the mean loss

  std::map<std::string, Tensor> grads;
  for (const model::Parameter& p : params.params()) grads[p.spec.name] = p.grad;
  std::vector<std::pair<std::string, Tensor>> outs{{"logits", logits}};
  Tensor loss = Tensor::empty({1});
  loss.f32()[0] = static_cast<float>(loss_sum / static_cast<double>(n));
  outs.emplace_back("loss", loss);
  for (auto& [name, g] : ckpt::to_hugging_face_layout(config, grads)) outs.emplace_back("grad." + name, g);
  ckpt::write_safetensors(out, outs);
  return 0;
}

}  // namespace tessera::apps
