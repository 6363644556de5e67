// Megatron-LM's text generation server API, without the HTTP: the requests of `PUT /api`
// (megatron/inference/text_generation_server.py) and of the OpenAI-like `POST /completions`
// (megatron/inference/endpoints/completions.py), validated with Megatron's messages, and their
// responses. A validation failure is a RequestError, which the server answers with HTTP 400.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "infer/generator.h"

namespace tessera::infer {

struct RequestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the operator allows a request (tessera serve's flags).
struct ServerLimits {
  int64_t max_prompts = 128;               // Megatron's limit
  int64_t max_tokens_to_generate = 1024;   // --max-tokens-to-generate
};

// A request of either endpoint, as generation needs it.
struct TextRequest {
  enum class Kind { Api, Completions } kind = Kind::Api;
  std::vector<std::string> prompts;
  std::vector<std::vector<int32_t>> prompt_ids;  // /completions may send token ids instead of text
  GenerationOptions options;
  bool add_bos = false;
  bool echo = false;  // /completions: return the prompt with the completion
  bool no_log = false;
};

// Parses and validates a request body. Throws RequestError naming the field and the rule.
TextRequest parse_api_request(const nlohmann::json& body, const ServerLimits& limits);
TextRequest parse_completions_request(const nlohmann::json& body, const ServerLimits& limits);

// Tokenizes the prompts (eod first with add_BOS, as Megatron) and checks they fit the model.
// Throws RequestError.
std::vector<std::vector<int32_t>> tokenize_prompts(const TextRequest& r, const data::Tokenizer& tokenizer,
                                                   const model::ModelConfig& config);

// Megatron's responses: PUT /api {"text", "segments", "logprobs", "tokens"} (each a list over the
// prompts: prompt + generation); POST /completions {"choices": [{"index", "text", "logprobs":
// {"token_logprobs", "tokens", "text_offset"}}]}.
nlohmann::json api_response(const std::vector<Generation>& generations, const TextRequest& r,
                            const data::Tokenizer& tokenizer);
nlohmann::json completions_response(const std::vector<Generation>& generations, const TextRequest& r,
                                    const data::Tokenizer& tokenizer);

// Tokenize, generate and answer (every rank of the model group calls it; all but the deciding rank
// may ignore the answer).
nlohmann::json run_text_request(const TextRequest& r, const ModelRunner& runner, const data::Tokenizer& tokenizer,
                                const model::ModelConfig& config);

}  // namespace tessera::infer
