#include "infer/text_generation_api.h"

#include <gtest/gtest.h>

namespace tessera::infer {
namespace {

using nlohmann::json;

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
      logits.f32()[i * config_.padded_vocab_size + static_cast<int64_t>(id)] = 10.0f;
    }
    return logits;
  }
  void agree(std::vector<int32_t>&) const override {}
  Scores score(const model::MicroBatch&) const override { return {}; }

 private:
  model::ModelConfig config_;
  std::string script_;  // '$' is eod
};

std::string api_error(const json& body, ServerLimits limits = {}) {
  try {
    parse_api_request(body, limits);
  } catch (const RequestError& e) {
    return e.what();
  }
  return "";
}

TEST(ApiRequest, FieldsAndDefaults) {
  TextRequest r = parse_api_request(json{{"prompts", {"ab", "c"}}}, {});
  EXPECT_EQ(r.prompts, (std::vector<std::string>{"ab", "c"}));
  EXPECT_EQ(r.options.sampling.tokens_to_generate, 64);
  EXPECT_EQ(r.options.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.options.return_logprobs);
  r = parse_api_request(json::parse(R"({"prompts": ["a"], "tokens_to_generate": 5, "temperature": 0.5,
      "top_p": 0.9, "logprobs": true, "random_seed": 7, "add_BOS": true, "stop_on_eol": true,
      "stop_on_double_eol": true, "no_log": true})"), {});
  EXPECT_EQ(r.options.sampling.tokens_to_generate, 5);
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.options.sampling.top_p, 0.9f);
  EXPECT_TRUE(r.options.return_logprobs && r.add_bos && r.options.stop_on_eol && r.options.stop_on_double_eol && r.no_log);
  EXPECT_EQ(r.options.sampling.random_seed, 7u);
  EXPECT_EQ(parse_api_request(json{{"prompts", {"a"}}, {"top_k", 4}}, {}).options.sampling.top_k, 4);
}

TEST(ApiRequest, ValidationMessagesAreMegatrons) {
  EXPECT_EQ(api_error(json::array()), "the request body must be a JSON object");
  EXPECT_EQ(api_error(json::object()), "prompts argument required");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"max_len", 3}}), "max_len is no longer used.  Replace with tokens_to_generate");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"sentences", {"a"}}}), "sentences is no longer used.  Replace with prompts");
  EXPECT_EQ(api_error(json{{"prompts", "a"}}), "prompts is not a list of strings");
  EXPECT_EQ(api_error(json{{"prompts", {1, 2}}}), "prompts is not a list of strings");
  EXPECT_EQ(api_error(json{{"prompts", json::array()}}), "prompts is empty");
  EXPECT_EQ(api_error(json{{"prompts", {"a", "b", "c"}}}, {2, 10}), "Maximum number of prompts is 2");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"tokens_to_generate", "5"}}), "tokens_to_generate must be an integer greater than 0");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"tokens_to_generate", 2.5}}), "tokens_to_generate must be an integer greater than 0");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"tokens_to_generate", -1}}), "tokens_to_generate must be an integer greater than or equal to 0");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"tokens_to_generate", 11}}, {128, 10}), "tokens_to_generate must be at most 10 (--max-tokens-to-generate)");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"tokens_to_generate", 0}}), "tokens_to_generate=0 implies logprobs should be True");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"logprobs", 1}}), "logprobs must be a boolean value");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"temperature", "hot"}}), "temperature must be a positive number less than or equal to 100.0");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"temperature", 0}}), "temperature must be a positive number less than or equal to 100.0");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"temperature", 101}}), "temperature must be a positive number less than or equal to 100.0");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"top_k", 1.5}}), "top_k must be an integer equal to or greater than 0 and less than or equal to 1000");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"top_k", 1001}}), "top_k must be equal to or greater than 0 and less than or equal to 1000");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"top_p", "x"}}), "top_p must be a positive float less than or equal to 1.0");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"top_k", 3}, {"top_p", 0.5}}), "cannot set both top-k and top-p samplings.");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"top_p", 1.5}}), "top_p must be less than or equal to 1.0");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"add_BOS", "yes"}}), "add_BOS must be a boolean value");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"stop_on_eol", 1}}), "stop_on_eol must be a boolean value");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"stop_on_double_eol", 0}}), "stop_on_double_eol must be a boolean value");
  EXPECT_EQ(api_error(json{{"prompts", {""}}}), "Empty prompts require add_BOS=true");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"random_seed", "1"}}), "random_seed must be integer");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"random_seed", -2}}), "random_seed must be a positive integer");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"beam_width", 2}}), "beam_width is not supported by tessera serve");
  EXPECT_EQ(api_error(json{{"prompts", {"a"}}, {"temprature", 1}}), "unknown field 'temprature'");
}

json run(const std::string& script, const json& body, ServerLimits limits = {}) {
  ScriptedRunner runner(script);
  CharTokenizer tok;
  TextRequest r = body.contains("prompts") ? parse_api_request(body, limits) : parse_completions_request(body, limits);
  return run_text_request(r, runner, tok, runner.config());
}

TEST(ApiResponse, TextSegmentsTokensAndLogprobs) {
  // Prompt "ab" (2 tokens): the script predicts position 2, 3, ...: "cde".
  json out = run("qqcdefgh", {{"prompts", {"ab"}}, {"tokens_to_generate", 3}, {"logprobs", true}, {"top_k", 1}});
  EXPECT_EQ(out["text"], json({"abcde"}));
  EXPECT_EQ(out["segments"], json({{"a", "b", "c", "d", "e"}}));
  EXPECT_EQ(out["tokens"], json({{0, 1, 2, 3, 4}}));
  ASSERT_EQ(out["logprobs"][0].size(), 4u);  // every token after the first
  // One-hot logits of 10 over 20 padded ids: the predicted token has log(e^10 / (e^10 + 19)).
  const double p = 10 - std::log(std::exp(10.0) + 19);
  EXPECT_NEAR(out["logprobs"][0][1].get<double>(), p, 1e-5);   // "c" was predicted after "ab"
  EXPECT_NEAR(out["logprobs"][0][0].get<double>(), -std::log(std::exp(10.0) + 19), 1e-5);  // "b" was not
  // Without logprobs the field is null; add_BOS puts eod first.
  out = run("qqqcdefgh", {{"prompts", {"ab"}}, {"tokens_to_generate", 2}, {"add_BOS", true}, {"top_k", 1}});
  EXPECT_TRUE(out["logprobs"].is_null());
  EXPECT_EQ(out["tokens"], json({{18, 0, 1, 2, 3}}));
  EXPECT_EQ(out["text"], json({"<eod>abcd"}));
  // tokens_to_generate 0 with logprobs scores the prompt only.
  out = run("qqcdefgh", {{"prompts", {"abc"}}, {"tokens_to_generate", 0}, {"logprobs", true}});
  EXPECT_EQ(out["tokens"], json({{0, 1, 2}}));
  EXPECT_EQ(out["logprobs"][0].size(), 2u);
}

TEST(ApiResponse, StopsAtEodEolAndDoubleEol) {
  json body = {{"prompts", {"ab"}}, {"tokens_to_generate", 6}, {"top_k", 1}};
  EXPECT_EQ(run("qqc$defgh", body)["tokens"], json({{0, 1, 2, 18}}));  // eod ends it, included
  EXPECT_EQ(run("qqc\nd\n\nefgh", body)["text"], json({"abc\nd\n\ne"}));  // no stop flags: 6 tokens
  body["stop_on_eol"] = true;
  EXPECT_EQ(run("qqc\nd\n\nefgh", body)["text"], json({"abc\n"}));
  body["stop_on_eol"] = false;
  body["stop_on_double_eol"] = true;
  EXPECT_EQ(run("qqc\nd\n\nefgh", body)["text"], json({"abc\nd\n\n"}));
  // A double newline across the prompt's end counts, as in Megatron (previous token).
  json b2 = {{"prompts", {"a\n"}}, {"tokens_to_generate", 6}, {"stop_on_double_eol", true}, {"top_k", 1}};
  EXPECT_EQ(run("qq\nabc", b2)["text"], json({"a\n\n"}));
}

TEST(ApiRequest, PromptsMustFitTheModel) {
  EXPECT_THROW(run("qq", {{"prompts", {"abcdefghij"}}, {"tokens_to_generate", 60}}), RequestError);
}

TEST(Completions, OpenAiFormWithEchoStopAndTokenPrompts) {
  json out = run("qqcdefgh", {{"prompt", "ab"}, {"max_tokens", 4}, {"temperature", 0}});
  ASSERT_EQ(out["choices"].size(), 1u);
  EXPECT_EQ(out["choices"][0]["index"], 0);
  EXPECT_EQ(out["choices"][0]["text"], "cdef");
  EXPECT_EQ(out["choices"][0]["logprobs"]["tokens"], json({"c", "d", "e", "f"}));
  EXPECT_EQ(out["choices"][0]["logprobs"]["text_offset"], json({2, 3, 4, 5}));
  EXPECT_EQ(out["choices"][0]["logprobs"]["token_logprobs"].size(), 4u);
  out = run("qqcdefgh", {{"prompt", {"ab"}}, {"max_tokens", 4}, {"echo", true}, {"stop", "e"}, {"temperature", 0}});
  EXPECT_EQ(out["choices"][0]["text"], "abcd");
  EXPECT_TRUE(out["choices"][0]["logprobs"]["token_logprobs"][0].is_null());
  out = run("qqcdefgh", {{"prompt", {{0, 1}, {0, 1}}}, {"max_tokens", 2}, {"temperature", 0}});
  EXPECT_EQ(out["choices"].size(), 2u);
  EXPECT_EQ(out["choices"][1]["text"], "cd");
  for (const json& bad : {json{{"max_tokens", 2}}, json{{"prompt", "a"}}, json{{"prompt", 5}, {"max_tokens", 1}},
                          json{{"prompt", "a"}, {"max_tokens", "2"}}, json{{"prompt", "a"}, {"max_tokens", 0}},
                          json{{"prompt", "a"}, {"max_tokens", 1}, {"n", 2}},
                          json{{"prompt", "a"}, {"max_tokens", 1}, {"logprobs", 3}},
                          json{{"prompt", "a"}, {"max_tokens", 1}, {"stop", 5}},
                          json{{"prompt", {{0, 99}}}, {"max_tokens", 1}}})
    EXPECT_THROW(run("qq", bad), RequestError) << bad.dump();
}

// Found by fuzz/text_generation_api_fuzzer.cc's check that accepted ids are the body's: 4294967297 was
// converted to id 1 and accepted. Ids beyond int32 are refused whatever the vocabulary.
TEST(Completions, TokenIdsBeyondInt32AreRefused) {
  for (const json& id : {json(4294967297LL), json(-4294967295LL), json(18446744073709551615ULL), json(2147483648LL)}) {
    try {
      parse_completions_request(json{{"prompt", json::array({1, id})}, {"max_tokens", 1}}, {});
      ADD_FAILURE() << id.dump() << " accepted";
    } catch (const RequestError& e) {
      EXPECT_EQ(std::string(e.what()), "prompt: token id " + id.dump() + " is outside the range of token ids");
    }
  }
  TextRequest r = parse_completions_request(json{{"prompt", {{2147483647, -2147483648LL}}}, {"max_tokens", 1}}, {});
  EXPECT_EQ(r.prompt_ids, (std::vector<std::vector<int32_t>>{{2147483647, INT32_MIN}}));
}

}  // namespace
}  // namespace tessera::infer
