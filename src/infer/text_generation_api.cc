#include "infer/text_generation_api.h"

#include <algorithm>
#include <set>

#include "core/check.h"
#include "infer/openai_completions.h"

namespace tessera::infer {
namespace {

using nlohmann::json;

bool is_int(const json& v) { return v.is_number_integer(); }
bool is_number(const json& v) { return v.is_number(); }

// A list of integers as token ids. One beyond int32 is refused here: converting it would wrap it into
// some other id, which the vocabulary check would then accept (found by fuzzing).
std::vector<int32_t> token_ids(const json& list) {
  std::vector<int32_t> ids;
  for (const json& x : list) {
    const bool fits = x.is_number_unsigned() ? x.get<uint64_t>() <= uint64_t{INT32_MAX}
                                             : x.get<int64_t>() >= INT32_MIN && x.get<int64_t>() <= INT32_MAX;
    if (!fits) reject_request("prompt: token id " + x.dump() + " is outside the range of token ids");
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

// A seed: any integer in [0, 2^64) (clients may send the largest, which JSON holds as unsigned).
bool is_seed(const json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }

}  // namespace

std::vector<int64_t> token_offsets(const std::vector<int32_t>& tokens, const data::Tokenizer& tokenizer) {
  // Each window starts kWindow tokens back: decoding from there gives the token's bytes as decoding the
  // whole prefix does (a character spans at most 4 bytes, so at most 4 tokens), and whatever decoding does
  // at a sequence's start (a dropped leading space, bytes of a character begun earlier) happens to both
  // windows alike and cancels.
  constexpr size_t kWindow = 8;
  std::vector<int64_t> offsets(tokens.size(), 0);
  auto decoded = [&](size_t begin, size_t end) {
    return static_cast<int64_t>(tokenizer.decode(std::span<const int32_t>(tokens.data() + begin, end - begin)).size());
  };
  for (size_t i = 1; i < tokens.size(); ++i) {
    const size_t begin = i - 1 > kWindow ? i - 1 - kWindow : 0;
    offsets[i] = offsets[i - 1] + decoded(begin, i) - decoded(begin, i - 1);
  }
  return offsets;
}

ServerLimits resolve_limits(ServerLimits limits, const data::Tokenizer& tokenizer, const model::ModelConfig& config) {
  if (limits.max_prompt_tokens == 0)
    limits.max_prompt_tokens = config.position_embedding == model::PositionEmbedding::LearnedAbsolute || config.seq_length <= 0
                                   ? config.max_position_embeddings
                                   : config.seq_length;
  if (limits.max_prompt_bytes == 0) {
    int64_t longest = 1;
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
      try {
        longest = std::max<int64_t>(longest, static_cast<int64_t>(tokenizer.token_text(id).size()));
      } catch (const std::exception&) {  // an id with no text (a reserved one)
      }
    }
    limits.max_prompt_bytes = limits.max_prompt_tokens * (longest + 1);
  }
  return limits;
}

TextRequest parse_api_request(const json& body, const ServerLimits& limits) {
  if (!body.is_object()) reject_request("the request body must be a JSON object");
  // Megatron's own messages for the fields it renamed, then the fields tessera does not implement
  // (refused rather than ignored, so every accepted field is honoured).
  if (!body.contains("prompts")) reject_request("prompts argument required");
  if (body.contains("max_len")) reject_request("max_len is no longer used.  Replace with tokens_to_generate");
  if (body.contains("sentences")) reject_request("sentences is no longer used.  Replace with prompts");
  static const std::set<std::string> known = {"prompts", "tokens_to_generate", "logprobs", "temperature", "top_k",
                                              "top_p", "add_BOS", "stop_on_eol", "stop_on_double_eol",
                                              "random_seed", "no_log"};
  static const std::set<std::string> unsupported = {"top_p_decay", "top_p_bound", "prevent_newline_after_colon",
                                                    "beam_width", "stop_token", "length_penalty"};
  for (const auto& [key, value] : body.items()) {
    if (unsupported.count(key)) reject_request(key + " is not supported by tessera serve");
    if (!known.count(key)) reject_request("unknown field '" + key + "'");
  }

  TextRequest r;
  r.kind = TextRequest::Kind::Api;
  const json& prompts = body["prompts"];
  if (!prompts.is_array()) reject_request("prompts is not a list of strings");
  if (prompts.empty()) reject_request("prompts is empty");
  if (static_cast<int64_t>(prompts.size()) > limits.max_prompts)
    reject_request("Maximum number of prompts is " + std::to_string(limits.max_prompts));
  for (const json& p : prompts) {
    if (!p.is_string()) reject_request("prompts is not a list of strings");
    r.prompts.push_back(p.get<std::string>());
  }

  SamplingOptions& s = r.options.sampling;
  s.tokens_to_generate = 64;  // Megatron's default
  if (body.contains("tokens_to_generate")) {
    const json& v = body["tokens_to_generate"];
    if (!is_int(v)) reject_request("tokens_to_generate must be an integer greater than 0");
    if (v.get<int64_t>() < 0) reject_request("tokens_to_generate must be an integer greater than or equal to 0");
    if (v.get<int64_t>() > limits.max_tokens_to_generate)
      reject_request("tokens_to_generate must be at most " + std::to_string(limits.max_tokens_to_generate) +
             " (--max-tokens-to-generate)");
    s.tokens_to_generate = v.get<int64_t>();
  }
  if (body.contains("logprobs")) {
    if (!body["logprobs"].is_boolean()) reject_request("logprobs must be a boolean value");
    r.options.return_logprobs = body["logprobs"].get<bool>();
  }
  if (s.tokens_to_generate == 0 && !r.options.return_logprobs)
    reject_request("tokens_to_generate=0 implies logprobs should be True");
  s.temperature = 1.0f;
  if (body.contains("temperature")) {
    const json& v = body["temperature"];
    if (!is_number(v)) reject_request("temperature must be a positive number less than or equal to 100.0");
    double t = v.get<double>();
    if (!(t > 0.0 && t <= 100.0)) reject_request("temperature must be a positive number less than or equal to 100.0");
    s.temperature = static_cast<float>(t);
  }
  if (body.contains("top_k")) {
    const json& v = body["top_k"];
    if (!is_int(v)) reject_request("top_k must be an integer equal to or greater than 0 and less than or equal to 1000");
    if (v.get<int64_t>() < 0 || v.get<int64_t>() > 1000)
      reject_request("top_k must be equal to or greater than 0 and less than or equal to 1000");
    s.top_k = v.get<int64_t>();
  }
  if (body.contains("top_p")) {
    const json& v = body["top_p"];
    if (!is_number(v)) reject_request("top_p must be a positive float less than or equal to 1.0");
    double p = v.get<double>();
    if (p > 0.0 && s.top_k > 0) reject_request("cannot set both top-k and top-p samplings.");
    if (!(p >= 0.0 && p <= 1.0)) reject_request("top_p must be less than or equal to 1.0");
    s.top_p = static_cast<float>(p);
  }
  for (const char* flag : {"add_BOS", "stop_on_double_eol", "stop_on_eol", "no_log"})
    if (body.contains(flag) && !body[flag].is_boolean()) reject_request(std::string(flag) + " must be a boolean value");
  r.add_bos = body.value("add_BOS", false);
  r.options.stop_on_double_eol = body.value("stop_on_double_eol", false);
  r.options.stop_on_eol = body.value("stop_on_eol", false);
  r.no_log = body.value("no_log", false);
  for (const std::string& p : r.prompts)
    if (p.empty() && !r.add_bos) reject_request("Empty prompts require add_BOS=true");
  if (body.contains("random_seed")) {
    const json& v = body["random_seed"];
    if (!is_int(v)) reject_request("random_seed must be integer");
    if (!is_seed(v)) reject_request("random_seed must be a positive integer");
    s.random_seed = v.get<uint64_t>();
  }
  return r;
}

namespace {

// /completions (Megatron's, openai false) and /v1/completions (openai true): one reading of the fields
// they share, with OpenAI's defaults and extensions where openai is set.
TextRequest parse_completions(const json& raw, const ServerLimits& limits, bool openai) {
  if (!raw.is_object()) reject_request("the request body must be a JSON object");
  // OpenAI's clients send null for fields they leave unset.
  json body = json::object();
  for (const auto& [key, value] : raw.items())
    if (!(openai && value.is_null())) body[key] = value;
  // The OpenAI fields this endpoint implements; "model" and "user" only name things (one model is served),
  // "stream" may only be false. Others are refused, as on /api, so that every accepted field is honoured;
  // /v1/completions also takes top_k (as vLLM) and OpenAI's fields at the values that change nothing.
  std::set<std::string> known = {"prompt", "max_tokens", "temperature", "top_p", "logprobs", "echo",
                                 "n", "best_of", "seed", "stop", "model", "user", "stream"};
  std::set<std::string> unsupported = {"suffix", "presence_penalty", "frequency_penalty", "logit_bias",
                                       "stream_options", "top_k"};
  if (openai)
    for (const char* field : {"top_k", "presence_penalty", "frequency_penalty", "logit_bias", "stream_options"}) {
      unsupported.erase(field);
      known.insert(field);
    }
  for (const auto& [key, value] : body.items()) {
    if (unsupported.count(key)) reject_request(key + " is not supported by tessera serve");
    if (!known.count(key)) reject_request("unknown field '" + key + "'");
  }
  if (!openai && body.contains("stream") && body["stream"] != false)
    reject_request("stream: only false is supported (no streaming; /v1/completions streams)");
  for (const char* field : {"model", "user"})
    if (body.contains(field) && !body[field].is_string()) reject_request(std::string(field) + " must be a string");
  for (const char* field : {"presence_penalty", "frequency_penalty"})
    if (body.contains(field) && !(is_number(body[field]) && body[field].get<double>() == 0))
      reject_request(std::string(field) + ": only 0 is supported (no penalties)");
  if (body.contains("logit_bias") && body["logit_bias"] != json::object())
    reject_request("logit_bias: only {} is supported (no biases)");
  TextRequest r;
  r.kind = openai ? TextRequest::Kind::OpenAi : TextRequest::Kind::Completions;
  r.eod_text_is_token = openai;
  if (!body.contains("prompt")) reject_request("prompt is required");
  const json& prompt = body["prompt"];
  auto is_id_list = [](const json& v) {
    return v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const json& x) { return is_int(x); });
  };
  if (prompt.is_string()) {
    r.prompts.push_back(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty() && std::all_of(prompt.begin(), prompt.end(), [](const json& x) { return x.is_string(); })) {
    for (const json& p : prompt) r.prompts.push_back(p.get<std::string>());
  } else if (is_id_list(prompt)) {
    r.prompt_ids.push_back(token_ids(prompt));
  } else if (prompt.is_array() && !prompt.empty() && std::all_of(prompt.begin(), prompt.end(), is_id_list)) {
    for (const json& p : prompt) r.prompt_ids.push_back(token_ids(p));
  } else {
    reject_request("prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids");
  }
  int64_t count = static_cast<int64_t>(r.prompts.size() + r.prompt_ids.size());
  if (count > limits.max_prompts) reject_request("Maximum number of prompts is " + std::to_string(limits.max_prompts));
  for (const std::string& p : r.prompts)
    if (p.empty()) reject_request("prompt: empty prompts are not supported");

  SamplingOptions& s = r.options.sampling;
  if (!body.contains("max_tokens") && !openai) reject_request("max_tokens is required");
  const json max_tokens = body.value("max_tokens", json(16));  // OpenAI's default
  if (!is_int(max_tokens) || max_tokens.get<int64_t>() < 0)
    reject_request("max_tokens must be an integer greater than or equal to 0");
  s.tokens_to_generate = max_tokens.get<int64_t>();
  if (s.tokens_to_generate > limits.max_tokens_to_generate)
    reject_request("max_tokens must be at most " + std::to_string(limits.max_tokens_to_generate) +
           " (--max-tokens-to-generate)");
  if (body.contains("temperature") && (!is_number(body["temperature"]) || body["temperature"].get<double>() < 0 ||
                                        body["temperature"].get<double>() > 100))
    reject_request("temperature must be a number in [0, 100]");
  if (body.contains("top_p") && (!is_number(body["top_p"]) || body["top_p"].get<double>() < 0 ||
                                  body["top_p"].get<double>() > 1))
    reject_request("top_p must be a number in [0, 1]");
  s.temperature = static_cast<float>(body.value("temperature", 1.0));
  s.top_p = static_cast<float>(body.value("top_p", 1.0));
  if (body.contains("top_k")) {  // vLLM's: -1 (or 0) keeps every token
    if (!is_int(body["top_k"]) || body["top_k"].get<int64_t>() < -1)
      reject_request("top_k must be an integer >= -1 (-1 or 0: no top-k filter)");
    s.top_k = std::max<int64_t>(0, body["top_k"].get<int64_t>());
  }
  if (openai && s.top_p == 1) s.top_p = 0;  // keeps every token: the sampler's "no filter"
  if (s.top_k > 0 && s.top_p > 0) reject_request("top_k and top_p: set only one of them (tessera samples with one filter)");
  if (s.temperature == 0) {  // OpenAI's greedy, which Megatron maps to top-k 1
    s.top_k = 1;
    s.top_p = 0;
  }
  if (body.contains("logprobs")) {
    if (!is_int(body["logprobs"]) || body["logprobs"].get<int64_t>() < 0)
      reject_request("logprobs must be an integer greater than or equal to 0");
    const int64_t n = body["logprobs"].get<int64_t>();
    if (!openai && n > 0) reject_request("logprobs > 0 (top log-probabilities) is not supported");
    if (n > limits.max_logprobs)
      reject_request("logprobs must be at most " + std::to_string(limits.max_logprobs) + " (--max-logprobs)");
    r.options.top_logprobs = n;
  }
  if (body.contains("echo") && !body["echo"].is_boolean()) reject_request("echo must be a boolean value");
  r.echo = body.value("echo", false);
  if (!r.echo && s.tokens_to_generate == 0)
    reject_request(openai ? "max_tokens: 0 is allowed only with echo=true (scoring the prompt)"
                  : "echo=False not supported when tokens_to_generate=0");
  for (const char* field : {"n", "best_of"}) {
    if (!body.contains(field)) continue;
    if (!is_int(body[field]) || body[field].get<int64_t>() < 1) reject_request(std::string(field) + " must be an integer >= 1");
    if (body[field].get<int64_t>() > 1)
      reject_request(openai ? std::string(field) + ": only 1 is supported (one completion per prompt)"
                    : std::string(field == std::string("n") ? "num_completions" : "best_of") + " > 1 not supported");
  }
  if (body.contains("seed")) {
    if (!is_seed(body["seed"])) reject_request("seed must be an integer in [0, 2^64)");
    s.random_seed = body["seed"].get<uint64_t>();
  }
  if (body.contains("stop")) {
    const json& stop = body["stop"];
    if (stop.is_string()) {
      r.options.stop_strings.push_back(stop.get<std::string>());
    } else if (stop.is_array() && std::all_of(stop.begin(), stop.end(), [](const json& x) { return x.is_string(); })) {
      r.options.stop_strings = stop.get<std::vector<std::string>>();
    } else {
      reject_request("stop must be a string or a list of strings");
    }
    // OpenAI's bound; each is searched for in the generated text after every token.
    if (openai && r.options.stop_strings.size() > 4) reject_request("stop: at most 4 stop strings");
  }
  if (openai) {
    // Log-probabilities only when asked for, and the prompt's only with echo: they make the prompt go in
    // one token a step (and bypass the prefix cache).
    r.options.return_logprobs = body.contains("logprobs");
    r.options.logprobs_of_prompt = r.echo;
    read_stream_fields(body, r);
  } else {
    r.options.return_logprobs = true;      // as Megatron's endpoint: always computed
    r.options.stop_on_double_eol = true;  // as Megatron's endpoint
  }
  return r;
}

}  // namespace

TextRequest parse_completions_request(const json& body, const ServerLimits& limits) {
  return parse_completions(body, limits, false);
}

TextRequest parse_openai_completions_request(const json& body, const ServerLimits& limits) {
  return parse_completions(body, limits, true);
}

void read_stream_fields(const json& body, TextRequest& r) {
  if (body.contains("stream") && !body["stream"].is_boolean()) reject_request("stream must be a boolean value");
  r.stream = body.value("stream", false);
  if (body.contains("stream_options")) {
    const json& o = body["stream_options"];
    if (!r.stream) reject_request("stream_options: only allowed with stream: true");
    if (!o.is_object()) reject_request("stream_options must be an object {\"include_usage\": boolean}");
    for (const auto& [key, value] : o.items())
      if (key != "include_usage") reject_request("stream_options: unknown field '" + key + "'");
    if (o.contains("include_usage") && !o["include_usage"].is_boolean())
      reject_request("stream_options: include_usage must be a boolean value");
    r.stream_usage = o.value("include_usage", false);
  }
  // Each chunk would carry its tokens' log-probs (and the first the echoed prompt): not built yet.
  if (r.stream && r.options.return_logprobs) reject_request("stream: log-probabilities are not streamed; ask without stream");
  if (r.stream && r.echo) reject_request("stream: echo is not streamed; ask without stream");
}

std::vector<int32_t> encode_with_eod(const data::Tokenizer& tokenizer, std::string_view text) {
  std::string eod = tokenizer.token_text(tokenizer.eod());
  // Where the tokenizer reads the text as the token already (NullTokenizer's "59", SentencePiece's
  // "</s>"), cutting it out would only split texts that merely contain it ("159").
  if (tokenizer.encode(eod) == std::vector<int32_t>{tokenizer.eod()}) return tokenizer.encode(text);
  std::vector<int32_t> ids;
  size_t at = 0;
  for (size_t found; !eod.empty() && (found = text.find(eod, at)) != std::string_view::npos; at = found + eod.size()) {
    const std::vector<int32_t> part = tokenizer.encode(text.substr(at, found - at));
    ids.insert(ids.end(), part.begin(), part.end());
    ids.push_back(tokenizer.eod());
  }
  const std::vector<int32_t> rest = tokenizer.encode(text.substr(at));
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

std::vector<std::vector<int32_t>> tokenize_prompts(const TextRequest& r, const data::Tokenizer& tokenizer,
                                                   const model::ModelConfig& config, const ServerLimits& limits) {
  // Texts by their bytes first: tokenizing an over-long text would take its time and memory for nothing.
  if (limits.max_prompt_bytes > 0)
    for (const std::string& p : r.prompts)
      if (static_cast<int64_t>(p.size()) > limits.max_prompt_bytes)
        reject_request("prompt: " + std::to_string(p.size()) + " bytes are more than --max-prompt-bytes " +
               std::to_string(limits.max_prompt_bytes));
  std::vector<std::vector<int32_t>> out;
  for (const std::string& p : r.prompts) {
    std::vector<int32_t> ids;
    if (r.add_bos) ids.push_back(tokenizer.eod());  // Megatron's add_BOS prepends the eod id
    std::vector<int32_t> text;
    try {
      text = r.eod_text_is_token ? encode_with_eod(tokenizer, p) : tokenizer.encode(p);
    } catch (const std::exception& e) {  // e.g. a NullTokenizer id outside its vocabulary
      reject_request(std::string("prompt cannot be tokenized: ") + e.what());
    }
    ids.insert(ids.end(), text.begin(), text.end());
    out.push_back(std::move(ids));
  }
  for (const auto& ids : r.prompt_ids) {
    for (int32_t id : ids)
      if (id < 0 || id >= tokenizer.vocab_size())
        reject_request("prompt: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
               std::to_string(tokenizer.vocab_size()) + ")");
    out.push_back(ids);
  }
  for (const auto& ids : out) {
    if (ids.empty()) reject_request("a prompt has no tokens");
    if (limits.max_prompt_tokens > 0 && static_cast<int64_t>(ids.size()) > limits.max_prompt_tokens)
      reject_request("prompt: " + std::to_string(ids.size()) + " tokens are more than --max-prompt-tokens " +
             std::to_string(limits.max_prompt_tokens));
    int64_t total = static_cast<int64_t>(ids.size()) + r.options.sampling.tokens_to_generate;
    if (config.position_embedding == model::PositionEmbedding::LearnedAbsolute &&
        total > config.max_position_embeddings)
      reject_request("Too many tokens.  The prompt of " + std::to_string(ids.size()) + " tokens plus " +
             std::to_string(r.options.sampling.tokens_to_generate) + " tokens to generate is more than the " +
             std::to_string(config.max_position_embeddings) + " positions of the model");
  }
  return out;
}

json api_response(const std::vector<Generation>& generations, const TextRequest& r, const data::Tokenizer& tokenizer) {
  json text = json::array(), segments = json::array(), logprobs = json::array(), tokens = json::array();
  for (const Generation& g : generations) {
    text.push_back(tokenizer.decode(g.tokens));
    json seg = json::array();
    for (int32_t id : g.tokens) seg.push_back(decode_one(tokenizer, id));
    segments.push_back(std::move(seg));
    logprobs.push_back(g.logprobs);
    tokens.push_back(g.tokens);
  }
  json out = {{"text", text}, {"segments", segments}, {"tokens", tokens}};
  out["logprobs"] = r.options.return_logprobs ? logprobs : json(nullptr);
  return out;
}

json completions_response(const std::vector<Generation>& generations, const TextRequest& r,
                          const data::Tokenizer& tokenizer) {
  json choices = json::array();
  for (size_t i = 0; i < generations.size(); ++i) {
    const Generation& g = generations[i];
    std::string all = tokenizer.decode(g.tokens);
    std::vector<int64_t> offsets = token_offsets(g.tokens, tokenizer);
    // The prompt's text as the model saw it (decoded back from its tokens).
    const size_t prompt_end = tokenizer.decode(std::span<const int32_t>(g.tokens.data(), g.prompt_length)).size();
    const size_t begin = r.echo ? 0 : prompt_end;
    size_t end = all.size();
    for (const std::string& s : r.options.stop_strings) {  // truncate at the first stop string
      size_t at = s.empty() ? std::string::npos : all.find(s, prompt_end);
      if (at != std::string::npos) end = std::min(end, at);
    }
    // Tokens that start inside [begin, end).
    auto first = std::lower_bound(offsets.begin(), offsets.end(), static_cast<int64_t>(begin)) - offsets.begin();
    auto last = std::lower_bound(offsets.begin(), offsets.end(), static_cast<int64_t>(end)) - offsets.begin();
    json token_logprobs = json::array(), token_text = json::array(), text_offset = json::array();
    for (auto t = first; t < last; ++t) {
      token_logprobs.push_back(t == 0 ? json(nullptr) : json(g.logprobs[t - 1]));
      token_text.push_back(decode_one(tokenizer, g.tokens[t]));
      text_offset.push_back(offsets[t]);
    }
    choices.push_back({{"index", i},
                       {"text", all.substr(begin, end - begin)},
                       {"logprobs", {{"token_logprobs", token_logprobs}, {"tokens", token_text},
                                     {"text_offset", text_offset}}}});
  }
  return {{"choices", choices}};
}

json run_text_request(const TextRequest& r, const ModelRunner& runner, const data::Tokenizer& tokenizer,
                      const model::ModelConfig& config) {
  std::vector<std::vector<int32_t>> prompts = tokenize_prompts(r, tokenizer, config);
  GenerationOptions options = r.options;
  options.sampling.eod = tokenizer.eod();
  std::vector<Generation> generations = generate(runner, prompts, options, &tokenizer);
  if (r.kind == TextRequest::Kind::OpenAi)  // the server gives its own id, name and time
    return openai_completions_response(generations, r, tokenizer, {"tessera", 0, config.max_position_embeddings},
                                       "cmpl-0", 0);
  return r.kind == TextRequest::Kind::Api ? api_response(generations, r, tokenizer)
                                          : completions_response(generations, r, tokenizer);
}

}  // namespace tessera::infer
