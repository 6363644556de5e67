#include "model/model_factory.h"

#include <map>

#include "kernels/vocab_parallel_loss.h"
#include "model/bert_model.h"
#include "model/gpt_model.h"

namespace tessera::model {
namespace {

std::map<std::string, ModelChunkBuilder>& builders() {
  static std::map<std::string, ModelChunkBuilder> b{
      {"gpt", [](const ModelConfig& c, ParameterSet& params, const parallel::TensorParallelContext& tp,
                 const ModelChunk& chunk) { return std::make_unique<GptModel>(c, params, tp, chunk); }},
      {"bert", [](const ModelConfig& c, ParameterSet& params, const parallel::TensorParallelContext& tp,
                  const ModelChunk& chunk) { return std::make_unique<BertModel>(c, params, tp, chunk); }}};
  return b;
}

}  // namespace

Tensor LanguageModelChunk::decode(const std::vector<int32_t>& tokens, const Tensor& input, DecodeState& state) const {
  Tensor out = decode_step({DecodeStep{tokens, state.length, {0}}}, input, state.pool);
  state.length += static_cast<int64_t>(tokens.size());
  return chunk().post_process ? out.view({config().padded_vocab_size}) : out;
}

Tensor LanguageModelChunk::logits(const MicroBatch&, const ForwardContext&) const {
  throw Error(str_cat("the ", config().family, " model has no next-token logits to distil from"));
}

void LossSums::add_auxiliary(const std::string& name, double value) {
  for (auto& [n, v] : auxiliary)
    if (n == name) {
      v += value;
      return;
    }
  auxiliary.emplace_back(name, value);
}

void LossSums::settle() {
  if (!lm_on_device.defined()) return;
  lm += kernels::loss_total_value(lm_on_device);
  lm_on_device = Tensor();
}

void LossSums::Routing::add(const Routing& other) {
  if (routed.size() < other.routed.size()) routed.resize(other.routed.size(), 0.0);
  for (size_t i = 0; i < other.routed.size(); ++i) routed[i] += other.routed[i];
  if (kept.size() < other.kept.size()) kept.resize(other.kept.size(), 0.0);
  for (size_t i = 0; i < other.kept.size(); ++i) kept[i] += other.kept[i];
  dropped += other.dropped;
  entries += other.entries;
}

void register_model_family(const std::string& family, ModelChunkBuilder builder) {
  builders()[family] = std::move(builder);
}

std::vector<std::string> model_families() {
  std::vector<std::string> names;
  for (const auto& [name, builder] : builders()) names.push_back(name);
  return names;
}

std::unique_ptr<LanguageModelChunk> build_model_chunk(const ModelConfig& config, ParameterSet& params,
                                                      const parallel::TensorParallelContext& tp,
                                                      const ModelChunk& chunk) {
  auto it = builders().find(config.family);
  if (it == builders().end()) {
    std::string known;
    for (const std::string& name : model_families()) known += (known.empty() ? "" : ", ") + name;
    throw Error(str_cat("model family '", config.family, "' is not known (known: ", known, ")"));
  }
  return it->second(config, params, tp, chunk);
}

}  // namespace tessera::model
