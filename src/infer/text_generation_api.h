// Megatron-LM's text generation server API, without the HTTP: the requests of `PUT /api`
// (megatron/inference/text_generation_server.py) and of the OpenAI-like `POST /completions`
// (megatron/inference/endpoints/completions.py), validated with Megatron's messages, and their
// responses; and OpenAI's `POST /v1/completions` (parsed here with /completions, whose code it shares;
// its response and error objects are in infer/openai_completions.h). A validation failure is a
// RequestError, which the server answers with HTTP 400.
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

[[noreturn]] inline void reject_request(const std::string& message) { throw RequestError(message); }

// The text of one token id.
inline std::string decode_one(const data::Tokenizer& tokenizer, int32_t id) {
  return tokenizer.decode(std::span<const int32_t>(&id, 1));
}

// The token ids of `text`, where the end-of-document token's text (GPT-2's "<|endoftext|>") is that
// token, as Hugging Face tokenizers read special tokens in text and as clients expect (lm-evaluation-
// harness finds the eos id by tokenizing tokenizer_info's eos_token). Tokenizers that already cut
// special tokens out (SentencePiece) give the same ids either way.
std::vector<int32_t> encode_with_eod(const data::Tokenizer& tokenizer, std::string_view text);

// What the operator allows a request (tessera serve's flags).
struct ServerLimits {
  int64_t max_prompts = 128;               // Megatron's limit
  int64_t max_tokens_to_generate = 1024;   // --max-tokens-to-generate
  // --max-prompt-tokens: tokens in one prompt (0: the model's, see resolve_limits). Prefilling is
  // linear in it and every waiting request waits for it, so it is bounded even where positions are not.
  int64_t max_prompt_tokens = 0;
  // --max-prompt-bytes: bytes in one prompt's text, checked before it is tokenized (0: derived from the
  // token limit, see resolve_limits), so an over-long prompt costs no tokenizer memory or time.
  int64_t max_prompt_bytes = 0;
  // --max-logprobs: the most top log-probabilities one position may ask for (/v1/completions' logprobs);
  // each costs a pass over the vocabulary per position.
  int64_t max_logprobs = 20;
};

// `limits` with its zeros replaced by the model's: max_prompt_tokens by the positions of a learned
// position embedding, else by --seq-length; max_prompt_bytes by max_prompt_tokens times one more than
// the tokenizer's longest token text (the separator a tokenizer may drop between tokens), so that any
// text that fits in the tokens passes, unless padded with runs of whitespace.
ServerLimits resolve_limits(ServerLimits limits, const data::Tokenizer& tokenizer, const model::ModelConfig& config);

// A request of either endpoint, as generation needs it.
struct TextRequest {
  // Api: PUT /api; Completions: Megatron's POST /completions; OpenAi: POST /v1/completions; Chat: POST
  // /v1/chat/completions (infer/openai_chat.h; its prompt_ids are the templated conversation).
  enum class Kind { Api, Completions, OpenAi, Chat } kind = Kind::Api;
  std::vector<std::string> prompts;
  std::vector<std::vector<int32_t>> prompt_ids;  // /completions may send token ids instead of text
  GenerationOptions options;
  bool add_bos = false;
  bool echo = false;  // /completions: return the prompt with the completion
  bool no_log = false;
  bool eod_text_is_token = false;  // /v1/completions: text prompts are read with encode_with_eod
  bool stream = false;             // OpenAI's stream: server-sent events (infer/event_stream.h)
  bool stream_usage = false;       // stream_options.include_usage: a last chunk with the usage counts
};

// Parses and validates a request body. Throws RequestError naming the field and the rule.
TextRequest parse_api_request(const nlohmann::json& body, const ServerLimits& limits);
TextRequest parse_completions_request(const nlohmann::json& body, const ServerLimits& limits);
// /v1/completions: /completions' fields read as OpenAI's API defines them (null as absent, max_tokens 16
// by default, no stop at a double newline) plus logprobs = N (up to limits.max_logprobs), top_k and
// OpenAI's fields at their no-op values (n, best_of 1, presence/frequency_penalty 0, logit_bias {}).
TextRequest parse_openai_completions_request(const nlohmann::json& body, const ServerLimits& limits);

// OpenAI's "stream" (a boolean) and "stream_options" ({"include_usage": boolean}, only with stream) into
// `r`. Streamed log-probabilities and echo are not implemented: refused with stream.
void read_stream_fields(const nlohmann::json& body, TextRequest& r);

// Tokenizes the prompts (eod first with add_BOS, as Megatron) and checks they fit the model and the
// limits whose fields are not 0 (texts by bytes before any is tokenized). Throws RequestError.
std::vector<std::vector<int32_t>> tokenize_prompts(const TextRequest& r, const data::Tokenizer& tokenizer,
                                                   const model::ModelConfig& config, const ServerLimits& limits = {});

// The byte offset of each token's text in the decoded sequence, as decoding each prefix would give it
// (characters split over tokens land on the token that completes them), in linear time: each token's
// length is measured in a window of the tokens before it, which holds any character it completes.
std::vector<int64_t> token_offsets(const std::vector<int32_t>& tokens, const data::Tokenizer& tokenizer);

// Megatron's responses: PUT /api {"text", "segments", "logprobs", "tokens"} (each a list over the
// prompts: prompt + generation); POST /completions {"choices": [{"index", "text", "logprobs":
// {"token_logprobs", "tokens", "text_offset"}}]}.
nlohmann::json api_response(const std::vector<Generation>& generations, const TextRequest& r,
                            const data::Tokenizer& tokenizer);
nlohmann::json completions_response(const std::vector<Generation>& generations, const TextRequest& r,
                                    const data::Tokenizer& tokenizer);

// Tokenize, generate and answer (every rank of the model group calls it; all but the deciding rank
// may ignore the answer). /v1/completions' answer has id "cmpl-0", created 0 and model "tessera" (the
// server writes its own).
nlohmann::json run_text_request(const TextRequest& r, const ModelRunner& runner, const data::Tokenizer& tokenizer,
                                const model::ModelConfig& config);

}  // namespace tessera::infer
