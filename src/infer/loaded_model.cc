#include "infer/loaded_model.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include "ckpt/checkpoint.h"
#include "model/model_factory.h"
#include "pipeline/schedules.h"

namespace tessera::infer {
namespace {

// What the tensor (and expert) groups split must split evenly, as training requires: checked by flag
// and rule before the layout is built or a tensor is read (a checkpoint reshards to any size that does).
void check_model_splits(const model::ModelConfig& c, const LoadOptions& o) {
  const int64_t tp = o.tensor_model_parallel_size;
  const int64_t etp = o.expert_tensor_parallel_size > 0 ? o.expert_tensor_parallel_size : tp;
  const auto split = [&](int64_t count, const char* what, int64_t ranks, const char* flag) {
    TESSERA_CHECK(count % ranks == 0, flag, "=", ranks, ": the checkpoint in ", o.load, " has ", count, " ", what,
                  ", which do not split evenly over that many ranks");
  };
  split(c.padded_vocab_size, "rows of padded vocabulary", tp, "--tensor-model-parallel-size");
  split(c.num_attention_heads, "attention heads", tp, "--tensor-model-parallel-size");
  split(c.num_query_groups, "query groups", tp, "--tensor-model-parallel-size");
  const auto& experts = c.moe.layer_experts;
  const bool dense_layers = !c.moe.enabled() || std::find(experts.begin(), experts.end(), 0) != experts.end();
  if (dense_layers) split(c.ffn_hidden_size, "MLP columns (--ffn-hidden-size)", tp, "--tensor-model-parallel-size");
  if (!c.moe.enabled()) return;
  split(c.moe.ffn_hidden_size, "expert MLP columns (--moe-ffn-hidden-size)", etp, "--expert-tensor-parallel-size");
  split(c.moe.shared_expert_intermediate_size, "shared-expert MLP columns", tp, "--tensor-model-parallel-size");
}

}  // namespace

LoadedModel::LoadedModel(const LoadOptions& o, comm::ProcessGroup& world) {
  TESSERA_CHECK(!o.load.empty(), "--load: a checkpoint directory is required");
  TESSERA_CHECK(ckpt::latest_checkpointed_iteration(o.load) >= 0, "--load=", o.load,
                ": no checkpoint there (latest_checkpointed_iteration.txt is missing)");
  nlohmann::json run = ckpt::latest_checkpoint_args(o.load);
  TESSERA_CHECK(run.contains("model"), "checkpoint in ", o.load, " does not record its model configuration");
  try {
    config_ = model::config_from_json(run["model"]);
  } catch (const Error& e) {
    throw Error(str_cat("--load=", o.load, ": ", e.what()));
  }
  config_.moe.grouped_gemm = o.moe_grouped_gemm;
  // Checkpoints reshard on load, so any tensor-parallel size works whose ranks split the saved padded
  // vocabulary (the padding, and so the logits, stay those of the trained model), heads and MLP evenly.
  check_model_splits(config_, o);
  if (o.seq_length > 0) {
    TESSERA_CHECK(config_.position_embedding != model::PositionEmbedding::LearnedAbsolute ||
                      o.seq_length <= config_.max_position_embeddings,
                  "--seq-length=", o.seq_length, ": the model has only ", config_.max_position_embeddings,
                  " positions");
    config_.seq_length = o.seq_length;
  }

  config_.params_dtype = o.params_dtype;

  // The tokenizer flags given are used (as Megatron builds its tokenizer from the flags); what they leave
  // out is the checkpoint's when the type is the one the model was trained with.
  data::TokenizerOptions tok = o.tokenizer;
  // The files: the copies the checkpoint carries, else (older checkpoints) the paths it records.
  if (tok.type.empty() || tok.type == run.value("tokenizer_type", "")) {
    tok.type = run.value("tokenizer_type", "");
    const std::map<std::string, std::string> carried = ckpt::latest_tokenizer_files(o.load);
    for (const auto& [field, key, flag] : {std::tuple{&tok.vocab_file, "vocab_file", "--vocab-file"},
                                           std::tuple{&tok.merge_file, "merge_file", "--merge-file"},
                                           std::tuple{&tok.tokenizer_model, "tokenizer_model", "--tokenizer-model"}}) {
      if (!field->empty()) continue;
      const auto copy = carried.find(key);
      *field = copy != carried.end() ? copy->second : run.value(key, std::string());
      std::error_code ec;
      TESSERA_CHECK(field->empty() || std::filesystem::is_regular_file(*field, ec), "--load=", o.load,
                    ": the checkpoint's tokenizer file ", *field, " is not there and the checkpoint carries no copy of "
                    "it (saved before checkpoints did): give ", flag);
    }
  }
  if (tok.type == "NullTokenizer" && tok.vocab_size == 0) tok.vocab_size = config_.vocab_size - 1;
  tokenizer_ = data::build_tokenizer(tok);
  TESSERA_CHECK(tokenizer_->vocab_size() == config_.vocab_size, "the ", tokenizer_->name(), " has ",
                tokenizer_->vocab_size(), " ids but the checkpoint's model was trained on ", config_.vocab_size);

  comm::ParallelLayout layout{world.size(), o.tensor_model_parallel_size, o.pipeline_model_parallel_size};
  layout.expert_model_parallel_size = o.expert_model_parallel_size;
  if (o.expert_tensor_parallel_size > 0) layout.expert_tensor_parallel_size = o.expert_tensor_parallel_size;
  comm::validate_layout(layout);
  for (int64_t e : config_.moe.layer_experts)
    TESSERA_CHECK(e % o.expert_model_parallel_size == 0, "--expert-model-parallel-size=", o.expert_model_parallel_size,
                  ": the checkpoint in ", o.load, " has a layer of ", e, " experts, which do not split evenly");
  TESSERA_CHECK(config_.moe.enabled() || o.expert_model_parallel_size == 1, "--expert-model-parallel-size=",
                o.expert_model_parallel_size, ": the checkpoint in ", o.load, " has no experts");
  state_ = std::make_unique<comm::ParallelState>(world, layout);
  experts_ = {&state_->expert_model_group(), &state_->expert_tensor_group(), &state_->expert_tensor_model_group()};
  tp_ = {&state_->tensor_group(), false, &experts_};
  // This rank's pipeline stage holds an even share of the layers (as in training, without interleaving).
  pipeline::ScheduleShape stages{o.pipeline_model_parallel_size, 1, 1};
  pipeline::validate_layer_split(static_cast<int>(config_.num_layers), stages);
  const int stage = state_->coordinates().pp;
  pipeline::LayerRange layers = pipeline::chunk_layers(static_cast<int>(config_.num_layers), stages, {stage, 0});
  model::ModelChunk chunk{layers.first, layers.count, stage == 0, stage == o.pipeline_model_parallel_size - 1};
  model_ = model::build_model_chunk(config_, params_, tp_, chunk);
  TESSERA_CHECK(model_->causal_language_model(), "--load=", o.load, ": the checkpoint holds a '", config_.family,
                "' model, a bidirectional encoder; generation, serving and zero-shot evaluation need a causal "
                "language model (gpt)");
  params_.allocate(0);
  iteration_ = ckpt::load_checkpoint(o.load, params_, nullptr).iteration;
  // The weights stay as loaded: decoding steps read fp32 GEMM weights from packed copies (issue 40).
  if (o.packed_weights) params_.keep_packed_weights();
  runner_ = make_model_runner(*model_, tp_, &state_->pipeline_group());
}

}  // namespace tessera::infer
