#include "infer/openai_chat.h"

#include <algorithm>
#include <set>

namespace tessera::infer {
namespace {

using nlohmann::json;

// OpenAI's fields that would change the reply in ways tessera does not implement: refused by name rather
// than ignored, so that every accepted field is honoured.
const std::set<std::string> kChatUnsupported = {
    "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "response_format", "audio",
    "modalities", "prediction", "reasoning_effort", "web_search_options", "suffix", "echo", "best_of"};
const std::set<std::string> kChatKnown = {
    "messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n",
    "logprobs", "top_logprobs", "stream", "stream_options", "user", "presence_penalty", "frequency_penalty",
    "logit_bias", "store", "metadata", "service_tier"};

// A message's content: a string, or OpenAI's list of parts of which only {"type": "text", "text"} is
// read (joined without separator, as OpenAI's templates concatenate them).
std::string chat_content(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    reject_request("messages: " + where + ".content must be a string or a list of {\"type\": \"text\", \"text\"} parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      reject_request("messages: " + at + " must be an object with a \"type\"");
    const std::string type = part["type"].get<std::string>();
    if (type != "text") reject_request("messages: " + at + " has type '" + type + "': only text parts are supported");
    if (!part.contains("text") || !part["text"].is_string()) reject_request("messages: " + at + ".text must be a string");
    for (const auto& [key, value] : part.items())
      if (key != "type" && key != "text") reject_request("messages: " + at + " has unknown field '" + key + "'");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> chat_messages(const json& list, const ServerLimits& limits) {
  if (!list.is_array() || list.empty()) reject_request("messages must be a non-empty list of {\"role\", \"content\"}");
  if (static_cast<int64_t>(list.size()) > limits.max_prompt_tokens && limits.max_prompt_tokens > 0)
    reject_request("messages: " + std::to_string(list.size()) + " messages are more than --max-prompt-tokens " +
                   std::to_string(limits.max_prompt_tokens));
  std::vector<ChatMessage> messages;
  int64_t bytes = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) reject_request("messages: " + where + " must be an object {\"role\", \"content\"}");
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content" && key != "name")
        reject_request("messages: " + where + " has unknown field '" + key + "'" +
                       (key == "tool_calls" || key == "tool_call_id" ? " (tool calls are not supported)" : ""));
    if (!m.contains("role") || !m["role"].is_string()) reject_request("messages: " + where + ".role must be a string");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system message
    if (role != "system" && role != "user" && role != "assistant")
      reject_request("messages: " + where + ".role '" + m["role"].get<std::string>() +
                     "' is not supported (system, developer, user, assistant)");
    if (m.contains("name") && !m["name"].is_string()) reject_request("messages: " + where + ".name must be a string");
    if (!m.contains("content") || m["content"].is_null()) reject_request("messages: " + where + ".content is required");
    messages.push_back({role, chat_content(m["content"], where)});
    bytes += static_cast<int64_t>(messages.back().content.size());
  }
  // Before any tokenizing, as a prompt's text is bounded (the template adds a few bytes per message).
  if (limits.max_prompt_bytes > 0 && bytes > limits.max_prompt_bytes)
    reject_request("messages: " + std::to_string(bytes) + " bytes of content are more than --max-prompt-bytes " +
                   std::to_string(limits.max_prompt_bytes));
  return messages;
}

// {token text, log-prob, its bytes} as OpenAI's chat log-probs give a token.
json chat_logprob_entry(const std::string& text, float logprob) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return {{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
}

}  // namespace

ChatRequest parse_chat_request(const json& raw, const ServerLimits& limits) {
  if (!raw.is_object()) reject_request("the request body must be a JSON object");
  json body = json::object();
  for (const auto& [key, value] : raw.items())
    if (!value.is_null()) body[key] = value;
  for (const auto& [key, value] : body.items()) {
    if (kChatUnsupported.count(key)) reject_request(key + " is not supported by tessera serve");
    if (!kChatKnown.count(key)) reject_request("unknown field '" + key + "'");
  }
  if (body.contains("store") && body["store"] != false) reject_request("store: only false is supported (nothing is stored)");
  if (body.contains("metadata") && !body["metadata"].is_object()) reject_request("metadata must be an object");
  if (body.contains("service_tier") && !body["service_tier"].is_string()) reject_request("service_tier must be a string");
  ChatRequest chat;
  if (!body.contains("messages")) reject_request("messages is required");
  chat.messages = chat_messages(body["messages"], limits);

  // The sampling fields are /v1/completions' (one reading, one set of messages); max_completion_tokens is
  // the newer name of max_tokens.
  json completions = {{"prompt", json::array({json::array({0})})}};
  for (const char* field : {"temperature", "top_p", "top_k", "seed", "stop", "model", "user", "presence_penalty",
                            "frequency_penalty", "logit_bias"})
    if (body.contains(field)) completions[field] = body[field];
  const char* length_field = body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (body.contains(length_field)) {
    const json& v = body[length_field];
    if (!v.is_number_integer() || v.get<int64_t>() < 1)
      reject_request(std::string(length_field) + " must be an integer greater than or equal to 1");
    if (v.get<int64_t>() > limits.max_tokens_to_generate)
      reject_request(std::string(length_field) + " must be at most " + std::to_string(limits.max_tokens_to_generate) +
                     " (--max-tokens-to-generate)");
    completions["max_tokens"] = v;
    chat.max_tokens_given = true;
  }
  chat.text = parse_openai_completions_request(completions, limits);
  TextRequest& r = chat.text;
  r.kind = TextRequest::Kind::Chat;
  r.prompt_ids.clear();

  if (body.contains("n")) {
    const json& v = body["n"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1) reject_request("n must be an integer >= 1");
    if (v.get<int64_t>() > limits.max_prompts)
      reject_request("n must be at most " + std::to_string(limits.max_prompts) + " (--max-prompts)");
    chat.n = v.get<int64_t>();
  }
  if (body.contains("logprobs") && !body["logprobs"].is_boolean()) reject_request("logprobs must be a boolean value");
  const bool logprobs = body.value("logprobs", false);
  if (body.contains("top_logprobs")) {
    const json& v = body["top_logprobs"];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) reject_request("top_logprobs must be an integer >= 0");
    if (v.get<int64_t>() > limits.max_logprobs)
      reject_request("top_logprobs must be at most " + std::to_string(limits.max_logprobs) + " (--max-logprobs)");
    if (!logprobs) reject_request("top_logprobs needs logprobs: true");
    r.options.top_logprobs = v.get<int64_t>();
  }
  r.options.return_logprobs = logprobs;
  r.options.logprobs_of_prompt = false;  // the reply's tokens only: the prompt goes in whole
  read_stream_fields(body, r);
  return chat;
}

void apply_chat_template(ChatRequest& chat, const ChatTemplate& chat_template, const ServerLimits& limits,
                         int64_t max_model_len) {
  std::vector<int32_t> ids;
  try {
    ids = chat_template.encode(chat.messages);
  } catch (const std::exception& e) {  // e.g. a NullTokenizer, which reads only numbers
    reject_request(std::string("messages cannot be tokenized: ") + e.what());
  }
  GenerationOptions& o = chat.text.options;
  if (chat_template.end_of_turn_id() >= 0) o.stop_ids.push_back(chat_template.end_of_turn_id());
  else o.stop_strings.push_back(chat_template.end_of_turn());
  if (!chat.max_tokens_given) {
    const int64_t room = max_model_len - static_cast<int64_t>(ids.size());
    o.sampling.tokens_to_generate = std::clamp<int64_t>(room, 1, std::max<int64_t>(1, limits.max_tokens_to_generate));
  }
  chat.text.prompt_ids.assign(static_cast<size_t>(chat.n), ids);
}

ReplyText reply_text(const Generation& g, const GenerationOptions& o, const data::Tokenizer& tokenizer) {
  const std::vector<int32_t>& tokens = g.tokens;
  const std::string all = tokenizer.decode(tokens);
  ReplyText reply;
  reply.begin = tokenizer.decode(std::span<const int32_t>(tokens.data(), g.prompt_length)).size();
  reply.end = all.size();
  const bool generated = static_cast<int64_t>(tokens.size()) > g.prompt_length;
  if (generated && (tokens.back() == tokenizer.eod() ||
                    std::find(o.stop_ids.begin(), o.stop_ids.end(), tokens.back()) != o.stop_ids.end())) {
    // The final token's text is not the model's writing: the reply ends where it starts.
    reply.end = reply.begin + continuation_text(tokenizer, std::span<const int32_t>(tokens.data(), g.prompt_length),
                                                std::span<const int32_t>(tokens.data() + g.prompt_length,
                                                                         tokens.size() - 1 - g.prompt_length))
                                  .size();
    reply.stopped = true;
  }
  for (const std::string& s : o.stop_strings) {
    const size_t at = s.empty() ? std::string::npos : all.find(s, reply.begin);
    if (at != std::string::npos && at < reply.end) reply.end = at, reply.stopped = true;
  }
  reply.end = std::max(reply.end, reply.begin);
  reply.text = all.substr(reply.begin, reply.end - reply.begin);
  return reply;
}

json chat_completion_response(const std::vector<Generation>& generations, const TextRequest& r,
                              const data::Tokenizer& tokenizer, const ServedModel& model, const std::string& id,
                              int64_t created) {
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < generations.size(); ++i) {
    const Generation& g = generations[i];
    const ReplyText reply = reply_text(g, r.options, tokenizer);
    json logprobs = nullptr;
    if (r.options.return_logprobs) {
      // The reply's tokens: those that start before its end (the prompt went in whole, so the log-probs
      // are the generated tokens', in order).
      const std::vector<int64_t> offsets = token_offsets(g.tokens, tokenizer);
      json content = json::array();
      for (size_t t = static_cast<size_t>(g.prompt_length); t < g.tokens.size(); ++t) {
        if (static_cast<size_t>(offsets[t]) >= reply.end) break;
        const size_t k = t - static_cast<size_t>(g.prompt_length);
        json entry = chat_logprob_entry(decode_one(tokenizer, g.tokens[t]), g.logprobs[k]);
        json top = json::array();
        if (r.options.top_logprobs > 0)
          for (const auto& [tid, lp] : g.top_logprobs[k]) top.push_back(chat_logprob_entry(decode_one(tokenizer, tid), lp));
        entry["top_logprobs"] = top;
        content.push_back(entry);
      }
      logprobs = {{"content", content}};
    }
    choices.push_back({{"index", i},
                       {"message", {{"role", "assistant"}, {"content", reply.text}}},
                       {"logprobs", logprobs},
                       {"finish_reason", reply.stopped ? "stop" : "length"}});
    // The n choices share one prompt, counted once (as OpenAI's usage).
    prompt_tokens = g.prompt_length;
    completion_tokens += static_cast<int64_t>(g.tokens.size()) - g.prompt_length;
  }
  return {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model.name},
          {"choices", choices},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                     {"total_tokens", prompt_tokens + completion_tokens}}}};
}

}  // namespace tessera::infer
