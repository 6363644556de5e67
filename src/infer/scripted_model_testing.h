// For the server API's tests: a one-character-per-id tokenizer and a model that predicts a script.
#pragma once

#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "infer/model_runner.h"

namespace tessera::infer {

// One character per id: "abcdefghijklmnopq\n" and eod 18 ("<eod>"), vocabulary 19.
class CharTokenizer final : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (char ch : text) ids.push_back(static_cast<int32_t>(kChars.find(ch)));
    return ids;
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += id == 18 ? std::string("<eod>") : std::string(1, kChars[id]);
    return s;
  }
  int32_t vocab_size() const override { return 19; }
  int32_t eod() const override { return 18; }
  std::string_view name() const override { return "CharTokenizer"; }
  static constexpr std::string_view kChars = "abcdefghijklmnopq\n";
};

// A model that always predicts script[position] (one-hot logits), to test stopping and responses.
class ScriptedRunner final : public ModelRunner {
 public:
  explicit ScriptedRunner(std::string script) : script_(std::move(script)) {
    config_.vocab_size = 19;
    config_.padded_vocab_size = 20;
    config_.max_position_embeddings = 64;
    config_.seq_length = 64;
  }
  const model::ModelConfig& config() const override { return config_; }
  model::KvPool make_kv_pool(int64_t blocks, int64_t block_size) const override { return {{}, blocks, block_size}; }
  Tensor decode_step(const std::vector<model::DecodeStep>& steps, model::KvPool&) const override {
    const int64_t n = static_cast<int64_t>(steps.size());
    Tensor logits = Tensor::zeros({n, config_.padded_vocab_size});
    for (int64_t i = 0; i < n; ++i) {
      const size_t length = static_cast<size_t>(steps[i].past) + steps[i].tokens.size();
      char next = script_[std::min<size_t>(length, script_.size() - 1)];
      size_t id = next == '$' ? 18 : CharTokenizer::kChars.find(next);
      TESSERA_CHECK(id < 19, "script character '", next, "' is not in the vocabulary");
      logits.host_f32()[i * config_.padded_vocab_size + static_cast<int64_t>(id)] = 10.0f;
    }
    return logits;
  }
  void agree(std::vector<int32_t>&) const override {}
  Scores score(const model::MicroBatch&) const override { return {}; }

 private:
  model::ModelConfig config_;
  std::string script_;  // '$' is eod
};

}  // namespace tessera::infer
