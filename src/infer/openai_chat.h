// OpenAI's chat completions API without the HTTP: the request of `POST /v1/chat/completions` (messages
// with string or text-part content, and the sampling fields it shares with /v1/completions, validated by
// the same code), its prompt through a chat template (infer/chat_template.h), and its response object.
// A validation failure is a RequestError, answered with HTTP 400 and OpenAI's error object.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "infer/chat_template.h"
#include "infer/openai_completions.h"
#include "infer/text_generation_api.h"

namespace tessera::infer {

struct ChatRequest {
  // kind Chat; options hold the sampling, stop strings and log-prob settings; prompt_ids are filled by
  // apply_chat_template (n copies of the conversation's tokens: one choice each, sampled apart).
  TextRequest text;
  std::vector<ChatMessage> messages;
  int64_t n = 1;
  bool max_tokens_given = false;
};

// Throws RequestError naming the field (messages[i].role, max_completion_tokens, ...) and the rule.
// Fields OpenAI has that change the output in ways tessera does not implement (tools, response_format,
// ...) are refused by name; null fields are absent, as OpenAI's clients send them.
ChatRequest parse_chat_request(const nlohmann::json& body, const ServerLimits& limits);

// The conversation's tokens as the prompt (n times), the template's end of turn as a stop (a string, or
// the special token's id), and without max_tokens the rest of the model's length (up to
// --max-tokens-to-generate). Throws RequestError when the messages cannot be tokenized.
void apply_chat_template(ChatRequest& request, const ChatTemplate& chat_template, const ServerLimits& limits,
                         int64_t max_model_len);

// The reply of one generation: its text after the prompt up to the first stop string (which it leaves
// out), without a final end-of-document (the tokenizer's) or stop-id token, and whether it stopped ("stop") rather than
// ran out of tokens ("length"). `end` is where the reply ends in the decoded whole sequence.
struct ReplyText {
  std::string text;
  bool stopped = false;
  size_t begin = 0, end = 0;
};
ReplyText reply_text(const Generation& g, const GenerationOptions& options, const data::Tokenizer& tokenizer);

// {"id", "object": "chat.completion", "created", "model", "choices": [{"index", "message": {"role":
// "assistant", "content"}, "logprobs", "finish_reason"}], "usage"}. logprobs (null unless asked for):
// {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}, one entry
// per token of the reply.
nlohmann::json chat_completion_response(const std::vector<Generation>& generations, const TextRequest& r,
                                        const data::Tokenizer& tokenizer, const ServedModel& model,
                                        const std::string& id, int64_t created);

}  // namespace tessera::infer
