// OpenAI's completions API and the endpoints its clients and lm-evaluation-harness probe, without the
// HTTP: the response of `POST /v1/completions` (requests are parsed by text_generation_api.h), OpenAI's
// error object, `POST /tokenize`, `POST /detokenize`, `GET /tokenizer_info` (the fields vLLM serves and
// lm-evaluation-harness's remote tokenizer reads) and `GET /v1/models`.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "infer/text_generation_api.h"

namespace tessera::infer {

// What a response says about the server rather than the request.
struct ServedModel {
  std::string name;      // --served-model-name: "model" of every response
  int64_t created = 0;   // Unix time the server started (GET /v1/models)
  int64_t max_model_len = 0;  // the longest sequence: prompt and generated tokens
};

// {"id", "object": "text_completion", "created", "model", "choices": [{"index", "text", "logprobs",
// "finish_reason"}], "usage"}. logprobs (null unless asked for) holds, per token of the text, "tokens",
// "token_logprobs" (null for the first token of the sequence, which nothing predicts), "top_logprobs"
// ({token text: log-prob} of the N most likely, null where the token's is) and "text_offset".
// finish_reason is "stop" at the end-of-document token (left out of the text, as OpenAI's) or a stop
// string (the text ends before it), else "length".
nlohmann::json openai_completions_response(const std::vector<Generation>& generations, const TextRequest& r,
                                           const data::Tokenizer& tokenizer, const ServedModel& model,
                                           const std::string& id, int64_t created);

// One of those choices: {"index", "text", "logprobs", "finish_reason"} (a stream's last chunk gives the
// text of its choice from it, so that a streamed text is the whole response's).
nlohmann::json openai_completion_choice(size_t index, const Generation& g, const TextRequest& r,
                                        const data::Tokenizer& tokenizer);

// {"error": {"message", "type", "param", "code"}}: type "invalid_request_error" for 4xx, "server_error" for
// 5xx; param is the request field the message names first (RequestErrors start with it), or null.
nlohmann::json openai_error(int status, const std::string& message);

// POST /tokenize {"prompt": text, "add_special_tokens"?, "model"?} -> {"tokens", "count", "max_model_len"}.
// The text is read as /v1/completions reads a text prompt (encode_with_eod); its bytes are bounded by
// limits.max_prompt_bytes. add_special_tokens is accepted for vLLM's clients: tessera's tokenizers add no
// special tokens to a text either way. Throws RequestError.
nlohmann::json tokenize_response(const nlohmann::json& body, const data::Tokenizer& tokenizer,
                                 const ServerLimits& limits, const ServedModel& model);
// POST /detokenize {"tokens": [ids], "model"?} -> {"prompt": text}; at most max_prompt_tokens +
// max_tokens_to_generate ids, each in the vocabulary. Throws RequestError.
nlohmann::json detokenize_response(const nlohmann::json& body, const data::Tokenizer& tokenizer,
                                   const ServerLimits& limits);
// GET /tokenizer_info: {"tokenizer_class", "eos_token", "eos_token_id", "bos_token", "bos_token_id",
// "pad_token", "vocab_size", "model_max_length", "max_model_len"}. Megatron's GPT tokenizers have one
// special token, the end of document, which also starts a document (add_BOS), so it is bos as well.
nlohmann::json tokenizer_info(const data::Tokenizer& tokenizer, const ServedModel& model);
// GET /v1/models: {"object": "list", "data": [{"id", "object": "model", "created", "owned_by", "max_model_len"}]}.
nlohmann::json models_response(const ServedModel& model);

}  // namespace tessera::infer
