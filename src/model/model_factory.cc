#include "model/model_factory.h"

#include <map>

#include "kernels/tensor_ops.h"
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

namespace {
constexpr int64_t kFirstSlots = 64;  // doubles: grown (doubled) when a step takes more
}  // namespace

Tensor LossSums::lm_total(Device device) {
  TESSERA_CHECK(keeps_on(device), "LossSums::lm_total: the sums are not kept on ", device.str());
  if (!slots.defined()) {
    slots = kernels::loss_totals(kFirstSlots, device);
    slots_used = 1;  // slot 0: the LM loss
  }
  TESSERA_CHECK(slots.device() == device, "LossSums: sums on ", slots.device().str(), " and ", device.str());
  return slots.narrow(0, 1);
}

Tensor LossSums::auxiliary_slot(const std::string& name, Device device, std::function<double(double)> finish) {
  lm_total(device);  // the slots exist
  if (slots_used == slots.numel()) {  // grown on the device: the slots' values so far copied after the kernels
    Tensor grown = kernels::loss_totals(2 * slots.numel(), device);
    kernels::copy(grown.narrow(0, slots_used), slots);
    slots = grown;
  }
  pending.push_back({name, slots_used, std::move(finish)});
  return slots.narrow(slots_used++, 1);
}

void LossSums::settle() {
  if (!slots.defined()) return;
  const std::vector<double> v = kernels::loss_totals_values(slots, slots_used);  // the one copy
  lm += v[0];
  for (const PendingAuxiliary& p : pending) add_auxiliary(p.name, p.finish(v[static_cast<size_t>(p.slot)]));
  slots = Tensor();
  slots_used = 0;
  pending.clear();
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
