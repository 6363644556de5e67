#include "infer/openai_completions.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace tessera::infer {
namespace {

using nlohmann::json;

// {token text: log-prob}, most likely first; ids of the same text keep the likelier one's value.
json top_dict(const std::vector<std::pair<int32_t, float>>& top, const data::Tokenizer& tokenizer) {
  json dict = json::object();
  for (const auto& [id, logprob] : top) {
    const std::string text = decode_one(tokenizer, id);
    if (!dict.contains(text)) dict[text] = logprob;
  }
  return dict;
}

}  // namespace

json openai_completion_choice(size_t index, const Generation& g, const TextRequest& r, const data::Tokenizer& tokenizer) {
  const std::vector<int32_t>& tokens = g.tokens;
  const std::string all = tokenizer.decode(tokens);
  const std::vector<int64_t> offsets = token_offsets(tokens, tokenizer);
  const size_t prompt_end = tokenizer.decode(std::span<const int32_t>(tokens.data(), g.prompt_length)).size();
  const size_t generated = tokens.size() - static_cast<size_t>(g.prompt_length);
  // The text ends before a final end-of-document token (whose text is not the model's writing) and before
  // the first stop string; the log-probs keep that token, as vLLM's (a client scoring with echo and
  // max_tokens 1 drops the last entry as the generated one, whatever it is).
  bool stopped = generated > 0 && tokens.back() == tokenizer.eod();
  size_t text_end = stopped ? static_cast<size_t>(offsets.back()) : all.size();
  size_t tokens_end = all.size() + 1;  // every token
  for (const std::string& s : r.options.stop_strings) {
    const size_t at = s.empty() ? std::string::npos : all.find(s, prompt_end);
    if (at != std::string::npos && at < text_end) text_end = tokens_end = at, stopped = true;
  }
  const size_t begin = r.echo ? 0 : prompt_end;
  json out = {{"index", index},
              {"text", text_end > begin ? all.substr(begin, text_end - begin) : std::string()},
              {"logprobs", nullptr},
              {"finish_reason", stopped ? "stop" : "length"}};
  if (!r.options.return_logprobs) return out;
  // The tokens that start inside [begin, tokens_end).
  const auto first = std::lower_bound(offsets.begin(), offsets.end(), static_cast<int64_t>(begin)) - offsets.begin();
  const auto last = std::lower_bound(offsets.begin(), offsets.end(), static_cast<int64_t>(tokens_end)) - offsets.begin();
  const bool top = r.options.top_logprobs > 0;
  json token_text = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
  // g.logprobs[k] is token k + 1's, or without the prompt's (no echo) the k-th generated token's.
  const int64_t shift = r.options.logprobs_of_prompt ? 1 : g.prompt_length;
  for (auto t = first; t < last; ++t) {
    const int64_t k = static_cast<int64_t>(t) - shift;
    token_text.push_back(decode_one(tokenizer, tokens[t]));
    token_logprobs.push_back(t == 0 || k < 0 ? json(nullptr) : json(g.logprobs[k]));
    if (top) top_logprobs.push_back(t == 0 || k < 0 ? json(nullptr) : top_dict(g.top_logprobs[k], tokenizer));
    text_offset.push_back(offsets[t]);
  }
  out["logprobs"] = {{"tokens", token_text}, {"token_logprobs", token_logprobs},
                     {"top_logprobs", top ? top_logprobs : json(nullptr)}, {"text_offset", text_offset}};
  return out;
}

namespace {

// The request field a message starts with (RequestErrors name their field first: "max_tokens must ...",
// "prompt: ...", "unknown field 'x'"), or null.
json param_of(const std::string& message) {
  static const std::string unknown = "unknown field '";
  if (message.rfind(unknown, 0) == 0) {
    const size_t end = message.find('\'', unknown.size());
    if (end != std::string::npos) return message.substr(unknown.size(), end - unknown.size());
  }
  size_t n = 0;
  while (n < message.size() && (std::islower(static_cast<unsigned char>(message[n])) || message[n] == '_')) ++n;
  static const std::set<std::string> fields = {
      "prompt", "max_tokens", "temperature", "top_p", "top_k", "logprobs", "echo", "n", "best_of", "seed", "stop",
      "model", "user", "stream", "stream_options", "suffix", "presence_penalty", "frequency_penalty", "logit_bias",
      "tokens", "add_special_tokens", "messages", "max_completion_tokens", "top_logprobs", "store", "metadata",
      "service_tier", "tools", "tool_choice", "functions", "function_call", "parallel_tool_calls", "response_format",
      "audio", "modalities", "prediction", "reasoning_effort", "web_search_options"};
  if (n > 0 && n < message.size() && (message[n] == ' ' || message[n] == ':') && fields.count(message.substr(0, n)))
    return message.substr(0, n);
  return nullptr;
}

void check_fields(const json& body, const std::set<std::string>& known) {
  if (!body.is_object()) reject_request("the request body must be a JSON object");
  for (const auto& [key, value] : body.items())
    if (!known.count(key)) reject_request("unknown field '" + key + "'");
  if (body.contains("model") && !body["model"].is_null() && !body["model"].is_string()) reject_request("model must be a string");
}

}  // namespace

json openai_completions_response(const std::vector<Generation>& generations, const TextRequest& r,
                                 const data::Tokenizer& tokenizer, const ServedModel& model, const std::string& id,
                                 int64_t created) {
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < generations.size(); ++i) {
    choices.push_back(openai_completion_choice(i, generations[i], r, tokenizer));
    prompt_tokens += generations[i].prompt_length;
    completion_tokens += static_cast<int64_t>(generations[i].tokens.size()) - generations[i].prompt_length;
  }
  return {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model.name},
          {"choices", choices},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                     {"total_tokens", prompt_tokens + completion_tokens}}}};
}

json openai_error(int status, const std::string& message) {
  return {{"error", {{"message", message}, {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                     {"param", param_of(message)}, {"code", nullptr}}}};
}

json tokenize_response(const json& body, const data::Tokenizer& tokenizer, const ServerLimits& limits,
                       const ServedModel& model) {
  check_fields(body, {"prompt", "add_special_tokens", "model"});
  if (!body.contains("prompt") || !body["prompt"].is_string()) reject_request("prompt must be a string (the text to tokenize)");
  if (body.contains("add_special_tokens") && !body["add_special_tokens"].is_boolean())
    reject_request("add_special_tokens must be a boolean value");
  const std::string& text = body["prompt"].get_ref<const std::string&>();
  if (limits.max_prompt_bytes > 0 && static_cast<int64_t>(text.size()) > limits.max_prompt_bytes)
    reject_request("prompt: " + std::to_string(text.size()) + " bytes are more than --max-prompt-bytes " +
           std::to_string(limits.max_prompt_bytes));
  std::vector<int32_t> ids;
  try {
    ids = encode_with_eod(tokenizer, text);
  } catch (const std::exception& e) {  // e.g. a NullTokenizer id outside its vocabulary
    reject_request(std::string("prompt cannot be tokenized: ") + e.what());
  }
  return {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", model.max_model_len}};
}

json detokenize_response(const json& body, const data::Tokenizer& tokenizer, const ServerLimits& limits) {
  check_fields(body, {"tokens", "model"});
  if (!body.contains("tokens") || !body["tokens"].is_array()) reject_request("tokens must be a list of token ids");
  const json& list = body["tokens"];
  const int64_t most = limits.max_prompt_tokens + limits.max_tokens_to_generate;
  if (static_cast<int64_t>(list.size()) > most)
    reject_request("tokens: " + std::to_string(list.size()) + " ids are more than " + std::to_string(most) +
           " (--max-prompt-tokens + --max-tokens-to-generate)");
  std::vector<int32_t> ids;
  for (const json& x : list) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tokenizer.vocab_size() ||
        (x.is_number_unsigned() && x.get<uint64_t>() >= static_cast<uint64_t>(tokenizer.vocab_size())))
      reject_request("tokens: " + x.dump() + " is not a token id of the vocabulary [0, " +
             std::to_string(tokenizer.vocab_size()) + ")");
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return {{"prompt", tokenizer.decode(ids)}};
}

json tokenizer_info(const data::Tokenizer& tokenizer, const ServedModel& model) {
  const std::string eos = tokenizer.token_text(tokenizer.eod());
  const json pad = tokenizer.pad() >= 0 ? json(tokenizer.token_text(tokenizer.pad())) : json(nullptr);
  return {{"tokenizer_class", std::string(tokenizer.name())},
          {"eos_token", eos},
          {"eos_token_id", tokenizer.eod()},
          {"bos_token", eos},
          {"bos_token_id", tokenizer.eod()},
          {"pad_token", pad},
          {"vocab_size", tokenizer.vocab_size()},
          {"model_max_length", model.max_model_len},
          {"max_model_len", model.max_model_len}};
}

json models_response(const ServedModel& model) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model.name}, {"object", "model"}, {"created", model.created},
                                 {"owned_by", "tessera"}, {"max_model_len", model.max_model_len}}})}};
}

}  // namespace tessera::infer
