#include "infer/text_generation_api.h"

#include <gtest/gtest.h>

#include "infer/scripted_model_testing.h"

#include <random>

namespace tessera::infer {
namespace {

using nlohmann::json;

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

// Pieces of UTF-8 ("é" split over ids 2 and 3, "€" over 4, 5 and 6) with two effects at a sequence's start
// that decoding a prefix has and a window must reproduce: a leading space is dropped (as SentencePiece
// does), and bytes that do not make a whole character become one U+FFFD per ill-formed part (3 bytes for
// 1 or 2, as GPT-2's decode does).
class PieceTokenizer final : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string bytes;
    for (int32_t id : ids) bytes += kPieces[static_cast<size_t>(id)];
    if (!bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
    std::string out;
    for (size_t i = 0; i < bytes.size();) {
      const auto lead = static_cast<unsigned char>(bytes[i]);
      const size_t n = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
      size_t k = 1;  // the lead and the continuation bytes that follow it, up to n
      while (n > 0 && k < n && i + k < bytes.size() && (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80) ++k;
      const bool whole = n > 0 && k == n;
      out += whole ? bytes.substr(i, n) : "\xEF\xBF\xBD";  // one U+FFFD per ill-formed part
      i += whole || n > 0 ? k : 1;
    }
    return out;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(kPieces.size()); }
  int32_t eod() const override { return 0; }
  std::string_view name() const override { return "PieceTokenizer"; }
  inline static const std::vector<std::string> kPieces = {"a", " b", "\xC3", "\xA9", "\xE2", "\x82", "\xAC", " ", "cd"};
};

// Issue 57: text_offset decoded every prefix (quadratic: a 64 KB prompt took a minute). The windowed
// offsets must equal the prefix ones on every sequence, whole characters or not.
TEST(Completions, TextOffsetsAreThoseOfDecodingEachPrefix) {
  PieceTokenizer tok;
  std::mt19937 random(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> tokens;
    const int length = 1 + trial % 40;
    while (static_cast<int>(tokens.size()) < length) {
      const int pick = static_cast<int>(random() % 7);  // mostly whole characters, sometimes stray bytes
      if (pick == 0) tokens.insert(tokens.end(), {2, 3});
      else if (pick == 1) tokens.insert(tokens.end(), {4, 5, 6});
      else tokens.push_back(static_cast<int32_t>(random() % 9));
    }
    std::vector<int64_t> prefix;
    for (size_t i = 0; i < tokens.size(); ++i)
      prefix.push_back(static_cast<int64_t>(tok.decode(std::span<const int32_t>(tokens.data(), i)).size()));
    ASSERT_EQ(token_offsets(tokens, tok), prefix) << "trial " << trial;
  }
}

std::string completions_error(const json& body) {
  try {
    parse_completions_request(body, {});
  } catch (const RequestError& e) {
    return e.what();
  }
  return "";
}

TEST(Completions, UnknownFieldsAreRefusedByNameOpenAisAccepted) {
  const json base = {{"prompt", "ab"}, {"max_tokens", 2}};
  auto with = [&](const char* key, const json& value) {
    json body = base;
    body[key] = value;
    return body;
  };
  EXPECT_EQ(completions_error(with("temprature", 1)), "unknown field 'temprature'");
  EXPECT_EQ(completions_error(with("logit_bias", json::object())), "logit_bias is not supported by tessera serve");
  EXPECT_EQ(completions_error(with("stream", true)), "stream: only false is supported (no streaming; /v1/completions streams)");
  EXPECT_EQ(completions_error(with("model", 3)), "model must be a string");
  json openai = base;
  openai.update({{"model", "gpt"}, {"user", "me"}, {"stream", false}, {"n", 1}, {"best_of", 1}, {"logprobs", 0},
                 {"echo", false}, {"stop", {"x"}}, {"seed", 1}, {"top_p", 0.5}, {"temperature", 0.7}});
  EXPECT_EQ(completions_error(openai), "");
}

TEST(ApiRequest, SeedsCoverTheWholeUint64Range) {
  const json largest = 18446744073709551615ULL;
  EXPECT_EQ(parse_api_request(json{{"prompts", {"a"}}, {"random_seed", largest}}, {}).options.sampling.random_seed,
            18446744073709551615ULL);
  EXPECT_EQ(parse_completions_request(json{{"prompt", "a"}, {"max_tokens", 1}, {"seed", largest}}, {})
                .options.sampling.random_seed,
            18446744073709551615ULL);
  EXPECT_EQ(completions_error(json{{"prompt", "a"}, {"max_tokens", 1}, {"seed", -1}}), "seed must be an integer in [0, 2^64)");
}

// A tokenizer that must not be asked: over-long texts are refused by their bytes before tokenizing.
class RefusingTokenizer final : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    ADD_FAILURE() << "tokenized " << text.size() << " bytes";
    return {1};
  }
  std::string decode(std::span<const int32_t>) const override { return "x"; }
  int32_t vocab_size() const override { return 4; }
  int32_t eod() const override { return 0; }
  std::string_view name() const override { return "RefusingTokenizer"; }
};

std::string tokenize_error(const TextRequest& r, const data::Tokenizer& tok, const model::ModelConfig& config,
                           const ServerLimits& limits) {
  try {
    tokenize_prompts(r, tok, config, limits);
  } catch (const RequestError& e) {
    return e.what();
  }
  return "";
}

TEST(ApiRequest, PromptLimitsInTokensAndBytes) {
  model::ModelConfig rope;
  rope.position_embedding = model::PositionEmbedding::Rope;
  rope.seq_length = 6;
  rope.max_position_embeddings = 4096;
  CharTokenizer chars;  // its longest text is "<eod>", 5 bytes
  const ServerLimits limits = resolve_limits({}, chars, rope);
  EXPECT_EQ(limits.max_prompt_tokens, 6);  // RoPE: --seq-length
  EXPECT_EQ(limits.max_prompt_bytes, 6 * (5 + 1));
  model::ModelConfig learned = rope;
  learned.position_embedding = model::PositionEmbedding::LearnedAbsolute;
  EXPECT_EQ(resolve_limits({}, chars, learned).max_prompt_tokens, 4096);
  EXPECT_EQ(resolve_limits({128, 10, 3, 7}, chars, rope).max_prompt_bytes, 7);  // given ones stay

  TextRequest r = parse_api_request(json{{"prompts", {"abcdefg"}}}, {});
  EXPECT_EQ(tokenize_error(r, chars, rope, limits), "prompt: 7 tokens are more than --max-prompt-tokens 6");
  r.prompts = {"abcdef"};
  EXPECT_EQ(tokenize_error(r, chars, rope, limits), "");
  r.prompts = {"ab", std::string(37, 'a')};
  EXPECT_EQ(tokenize_error(r, RefusingTokenizer(), rope, limits), "prompt: 37 bytes are more than --max-prompt-bytes 36");
}

}  // namespace
}  // namespace tessera::infer
