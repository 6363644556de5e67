#include "infer/openai_completions.h"

#include <gtest/gtest.h>

#include <cmath>

#include "infer/scripted_model_testing.h"

namespace tessera::infer {
namespace {

using nlohmann::json;

std::string v1_error(const json& body, ServerLimits limits = {}) {
  try {
    parse_openai_completions_request(body, limits);
  } catch (const RequestError& e) {
    return e.what();
  }
  return "";
}

json run_v1(const std::string& script, const json& body) {
  ScriptedRunner runner(script);
  CharTokenizer tok;
  return run_text_request(parse_openai_completions_request(body, {}), runner, tok, runner.config());
}

// log p of the scripted id (logit 10 among 19 others at 0: the padded vocabulary of 20) and of any other.
const double kScripted = 10 - std::log(std::exp(10.0) + 19), kOther = -std::log(std::exp(10.0) + 19);

TEST(OpenAiRequest, OpenAisDefaultsNullsAndNoOpFields) {
  TextRequest r = parse_openai_completions_request(json{{"prompt", "ab"}}, {});
  EXPECT_EQ(r.kind, TextRequest::Kind::OpenAi);
  EXPECT_EQ(r.options.sampling.tokens_to_generate, 16);  // OpenAI's default
  EXPECT_FALSE(r.options.stop_on_double_eol);            // Megatron's /completions stops there; OpenAI does not
  EXPECT_FALSE(r.options.return_logprobs);               // only when asked: it feeds the prompt a token a step
  EXPECT_EQ(r.options.sampling.top_p, 0.0f);             // top_p 1 keeps everything: no filter
  r = parse_openai_completions_request(json::parse(R"({"prompt": [[1, 2]], "max_tokens": 0, "echo": true,
      "logprobs": 5, "top_k": 7, "top_p": null, "stop": null, "seed": 3, "n": 1, "best_of": 1,
      "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "stream": false, "user": "u",
      "model": "any name"})"), {});
  EXPECT_TRUE(r.options.return_logprobs);
  EXPECT_TRUE(r.options.logprobs_of_prompt);  // echo: the prompt's too
  EXPECT_EQ(r.options.top_logprobs, 5);
  EXPECT_EQ(r.options.sampling.top_k, 7);
  // Without echo only the generated tokens' (the prompt goes in whole, and may come from the prefix cache).
  EXPECT_FALSE(parse_openai_completions_request(json{{"prompt", "a"}, {"logprobs", 1}}, {}).options.logprobs_of_prompt);
  EXPECT_EQ(r.options.sampling.random_seed, 3u);
  EXPECT_EQ(r.prompt_ids, (std::vector<std::vector<int32_t>>{{1, 2}}));
  EXPECT_EQ(parse_openai_completions_request(json{{"prompt", "a"}, {"top_k", -1}}, {}).options.sampling.top_k, 0);
  r = parse_openai_completions_request(json{{"prompt", "a"}, {"temperature", 0}, {"top_k", 5}}, {});
  EXPECT_EQ(r.options.sampling.top_k, 1);  // greedy
}

TEST(OpenAiRequest, ErrorsNameTheFieldAndRule) {
  ServerLimits limits;
  limits.max_logprobs = 3;
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"logprobs", 4}}, limits), "logprobs must be at most 3 (--max-logprobs)");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"n", 2}}), "n: only 1 is supported (one completion per prompt)");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"best_of", 3}}), "best_of: only 1 is supported (one completion per prompt)");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"presence_penalty", 0.5}}), "presence_penalty: only 0 is supported (no penalties)");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"logit_bias", {{"1", 5}}}}), "logit_bias: only {} is supported (no biases)");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"max_tokens", 0}}),
            "max_tokens: 0 is allowed only with echo=true (scoring the prompt)");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"stop", {"a", "b", "c", "d", "e"}}}), "stop: at most 4 stop strings");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"top_k", 2}, {"top_p", 0.5}}),
            "top_k and top_p: set only one of them (tessera samples with one filter)");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"top_k", -2}}), "top_k must be an integer >= -1 (-1 or 0: no top-k filter)");
  // Streams: text only (log-probs and echo are not streamed), stream_options only with stream.
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}), "");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"stream", 1}}), "stream must be a boolean value");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"stream", true}, {"logprobs", 1}}),
            "stream: log-probabilities are not streamed; ask without stream");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"stream", true}, {"echo", true}}), "stream: echo is not streamed; ask without stream");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"stream_options", {{"include_usage", true}}}}),
            "stream_options: only allowed with stream: true");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"stream", true}, {"stream_options", {{"usage", true}}}}),
            "stream_options: unknown field 'usage'");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"suffix", "x"}}), "suffix is not supported by tessera serve");
  EXPECT_EQ(v1_error(json{{"prompt", "a"}, {"max_token", 3}}), "unknown field 'max_token'");
  // Megatron's /completions keeps its own rules.
  EXPECT_THROW(parse_completions_request(json{{"prompt", "a"}, {"max_tokens", 1}, {"logprobs", 2}}, {}), RequestError);
  EXPECT_THROW(parse_completions_request(json{{"prompt", "a"}, {"max_tokens", 1}, {"top_k", 2}}, {}), RequestError);
}

TEST(OpenAiError, ObjectWithTypeAndTheFieldAsParam) {
  json e = openai_error(400, "max_tokens must be an integer greater than or equal to 0");
  EXPECT_EQ(e["error"]["message"], "max_tokens must be an integer greater than or equal to 0");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "max_tokens");
  EXPECT_TRUE(e["error"]["code"].is_null());
  EXPECT_EQ(openai_error(400, "prompt: token id 99 is outside the vocabulary [0, 19)")["error"]["param"], "prompt");
  EXPECT_EQ(openai_error(400, "unknown field 'max_token'")["error"]["param"], "max_token");
  EXPECT_TRUE(openai_error(400, "malformed JSON: x")["error"]["param"].is_null());
  EXPECT_EQ(openai_error(503, "the server is full")["error"]["type"], "server_error");
}

// The request lm-evaluation-harness's local-completions sends for a loglikelihood: token ids, echo,
// logprobs 1, max_tokens 1, temperature 0; it sums token_logprobs[ctxlen:-1] and calls the continuation
// greedy when each of those equals the largest value of its top_logprobs.
TEST(OpenAiResponse, LoglikelihoodAsLmEvalReadsIt) {
  // Prompt "abcd": the script predicts "c" after "ab" (right) and "q" after "abc" (wrong, "d" came).
  json out = run_v1("qqcqef", {{"prompt", {{0, 1, 2, 3}}}, {"max_tokens", 1}, {"echo", true}, {"logprobs", 1},
                               {"temperature", 0}, {"seed", 1234}, {"model", "m"}});
  EXPECT_EQ(out["object"], "text_completion");
  EXPECT_EQ(out["id"], "cmpl-0");
  EXPECT_EQ(out["usage"], json({{"prompt_tokens", 4}, {"completion_tokens", 1}, {"total_tokens", 5}}));
  const json& c = out["choices"][0];
  EXPECT_EQ(c["text"], "abcde");
  EXPECT_EQ(c["finish_reason"], "length");
  const json& lp = c["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c", "d", "e"}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2, 3, 4}));
  ASSERT_EQ(lp["token_logprobs"].size(), 5u);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null());  // nothing predicts the first
  EXPECT_NEAR(lp["token_logprobs"][2].get<double>(), kScripted, 1e-6);                  // "c" after "ab"
  EXPECT_NEAR(lp["token_logprobs"][3].get<double>(), kOther, 1e-6);                     // "d" after "abc"
  // Continuation "cd" (ctxlen 2): greedy at "c" (its value is the top one, exactly), not at "d".
  EXPECT_EQ(lp["top_logprobs"][2], json({{"c", lp["token_logprobs"][2]}}));
  EXPECT_EQ(lp["top_logprobs"][3], json({{"q", lp["token_logprobs"][2]}}));
  EXPECT_NE(lp["token_logprobs"][3], lp["top_logprobs"][3]["q"]);
}

TEST(OpenAiResponse, FinishReasonsAndTheEndOfDocument) {
  // The end of document ends the text ("stop") but stays in the log-probs, as vLLM's.
  json c = run_v1("qqcd$", {{"prompt", "ab"}, {"max_tokens", 5}, {"logprobs", 0}})["choices"][0];
  EXPECT_EQ(c["text"], "cd");
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(c["logprobs"]["tokens"], json({"c", "d", "<eod>"}));
  EXPECT_TRUE(c["logprobs"]["top_logprobs"].is_null());  // logprobs 0: the chosen tokens' only
  // A stop string ends the text before it.
  c = run_v1("qqcdefgh", {{"prompt", "ab"}, {"max_tokens", 5}, {"stop", {"x", "e"}}, {"temperature", 0}})["choices"][0];
  EXPECT_EQ(c["text"], "cd");
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_TRUE(c["logprobs"].is_null());
  // No double-newline stop on /v1 (Megatron's /completions has one).
  c = run_v1("q\n\nabc", {{"prompt", "a"}, {"max_tokens", 4}, {"temperature", 0}})["choices"][0];
  EXPECT_EQ(c["text"], "\n\nab");
  EXPECT_EQ(c["finish_reason"], "length");
  // Several prompts: one choice each, in order; top-N dicts hold N entries, most likely first.
  json out = run_v1("qqcdef", {{"prompt", {"ab", "ab"}}, {"max_tokens", 1}, {"logprobs", 3}, {"temperature", 0}});
  ASSERT_EQ(out["choices"].size(), 2u);
  EXPECT_EQ(out["choices"][1]["index"], 1);
  const json& top = out["choices"][1]["logprobs"]["top_logprobs"][0];
  EXPECT_EQ(top.size(), 3u);
  EXPECT_NEAR(top["c"].get<double>(), kScripted, 1e-6);
  EXPECT_NEAR(top["a"].get<double>(), kOther, 1e-6);  // ties at logit 0 go to the lowest ids
}

TEST(TopLogprobs, BitForBitTheChosenTokensValue) {
  Tensor row = Tensor::zeros({1, 7});
  for (int64_t i = 0; i < 7; ++i) row.f32()[i] = 0.37f * static_cast<float>(i * i % 5) - 1.1f;
  row.f32()[6] = 100.0f;  // a padding id: in the normalisation, never a candidate
  const auto top = top_token_logprobs(row, 6, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 2);  // 4 % 5 = 4 is the largest among ids 0..5 (ids 2 and 3: 4 and 9 % 5 = 4)
  EXPECT_EQ(top[1].first, 3);
  for (const auto& [id, logprob] : top) EXPECT_EQ(logprob, token_logprob(row, id));  // exactly
}

TEST(TokenizerEndpoints, TokenizeDetokenizeInfoAndModels) {
  CharTokenizer tok;
  ServerLimits limits;
  limits.max_prompt_bytes = 8;
  limits.max_prompt_tokens = 4;
  limits.max_tokens_to_generate = 2;
  const ServedModel model{"tiny", 123, 64};
  // The end of document's text is that token (lm-eval finds eos_token_id by tokenizing eos_token).
  EXPECT_EQ(tokenize_response(json{{"prompt", "ab<eod>c"}, {"add_special_tokens", false}}, tok, limits, model),
            json({{"tokens", {0, 1, 18, 2}}, {"count", 4}, {"max_model_len", 64}}));
  EXPECT_THROW(tokenize_response(json{{"prompt", "abcdefghi"}}, tok, limits, model), RequestError);  // > 8 bytes
  EXPECT_THROW(tokenize_response(json{{"text", "a"}}, tok, limits, model), RequestError);
  EXPECT_EQ(detokenize_response(json{{"tokens", {0, 1, 18}}}, tok, limits), json({{"prompt", "ab<eod>"}}));
  EXPECT_THROW(detokenize_response(json{{"tokens", {0, 19}}}, tok, limits), RequestError);
  EXPECT_THROW(detokenize_response(json{{"tokens", {0, 1, 2, 3, 4, 5, 6}}}, tok, limits), RequestError);  // > 4 + 2
  EXPECT_THROW(detokenize_response(json{{"tokens", {0}}, {"extra", 1}}, tok, limits), RequestError);
  const json info = tokenizer_info(tok, model);
  EXPECT_EQ(info["eos_token"], "<eod>");
  EXPECT_EQ(info["eos_token_id"], 18);
  EXPECT_EQ(info["vocab_size"], 19);
  EXPECT_EQ(info["max_model_len"], 64);
  EXPECT_EQ(info["tokenizer_class"], "CharTokenizer");
  const json models = models_response(model);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["created"], 123);
  // Where the tokenizer already reads the eod text as the token, it is not cut out of other texts.
  EXPECT_EQ(encode_with_eod(tok, "ab"), (std::vector<int32_t>{0, 1}));
}

}  // namespace
}  // namespace tessera::infer
