#include "infer/openai_chat.h"

#include <gtest/gtest.h>

#include "infer/batch_decoder.h"
#include "infer/event_stream.h"
#include "infer/scripted_model_testing.h"

namespace tessera::infer {
namespace {

using nlohmann::json;

std::string chat_error(const json& body, ServerLimits limits = {}) {
  try {
    parse_chat_request(body, limits);
  } catch (const RequestError& e) {
    return e.what();
  }
  return "";
}

json with_messages(json body) {
  if (!body.contains("messages")) body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
  return body;
}

TEST(ChatRequest, ReadsMessagesInEitherContentFormAndOpenAisFields) {
  const json body = json::parse(R"({"model": "m", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}], "name": "x"},
      {"role": "assistant", "content": "ok"}],
      "max_completion_tokens": 7, "temperature": 0, "stop": "q", "n": 3, "logprobs": true, "top_logprobs": 2,
      "seed": 5, "user": "u", "tools": null, "store": false})");
  const ChatRequest chat = parse_chat_request(body, {});
  ASSERT_EQ(chat.messages.size(), 3u);
  EXPECT_EQ(chat.messages[0].role, "system");  // OpenAI's newer name for it
  EXPECT_EQ(chat.messages[1].content, "abcd");
  EXPECT_EQ(chat.text.kind, TextRequest::Kind::Chat);
  EXPECT_EQ(chat.text.options.sampling.tokens_to_generate, 7);
  EXPECT_EQ(chat.text.options.sampling.top_k, 1);  // temperature 0: greedy
  EXPECT_EQ(chat.text.options.sampling.random_seed, 5u);
  EXPECT_EQ(chat.text.options.stop_strings, std::vector<std::string>{"q"});
  EXPECT_EQ(chat.n, 3);
  EXPECT_TRUE(chat.text.options.return_logprobs);
  EXPECT_FALSE(chat.text.options.logprobs_of_prompt);  // the reply's only: the prompt goes in whole
  EXPECT_EQ(chat.text.options.top_logprobs, 2);
  EXPECT_FALSE(chat.text.stream);
  const ChatRequest streamed = parse_chat_request(with_messages({{"stream", true}, {"stream_options", {{"include_usage", true}}}}), {});
  EXPECT_TRUE(streamed.text.stream);
  EXPECT_TRUE(streamed.text.stream_usage);
}

TEST(ChatRequest, BadRequestsAreRefusedNamingTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array(), "the request body must be a JSON object"},
      {json::object(), "messages is required"},
      {{{"messages", json::array()}}, "messages must be a non-empty list of {\"role\", \"content\"}"},
      {{{"messages", "hi"}}, "messages must be a non-empty list of {\"role\", \"content\"}"},
      {{{"messages", {{{"role", "robot"}, {"content", "x"}}}}},
       "messages: messages[0].role 'robot' is not supported (system, developer, user, assistant)"},
      {{{"messages", {{{"role", "user"}}}}}, "messages: messages[0].content is required"},
      {{{"messages", {{{"role", "user"}, {"content", 5}}}}},
       "messages: messages[0].content must be a string or a list of {\"type\": \"text\", \"text\"} parts"},
      {{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "u"}}}}}}}},
       "messages: messages[0].content[0] has type 'image_url': only text parts are supported"},
      {{{"messages", {{{"content", "x"}}}}}, "messages: messages[0].role must be a string"},
      {{{"messages", {{{"role", "tool"}, {"content", "x"}, {"tool_call_id", "1"}}}}},
       "messages: messages[0] has unknown field 'tool_call_id' (tool calls are not supported)"},
      {with_messages({{"tools", json::array()}}), "tools is not supported by tessera serve"},
      {with_messages({{"frobnicate", 1}}), "unknown field 'frobnicate'"},
      {with_messages({{"max_tokens", 0}}), "max_tokens must be an integer greater than or equal to 1"},
      {with_messages({{"max_completion_tokens", 5000}}), "max_completion_tokens must be at most 1024 (--max-tokens-to-generate)"},
      {with_messages({{"temperature", "hot"}}), "temperature must be a number in [0, 100]"},
      {with_messages({{"top_logprobs", 2}}), "top_logprobs needs logprobs: true"},
      {with_messages({{"logprobs", 1}}), "logprobs must be a boolean value"},
      {with_messages({{"n", 0}}), "n must be an integer >= 1"},
      {with_messages({{"stream_options", {{"include_usage", true}}}}), "stream_options: only allowed with stream: true"},
      {with_messages({{"stream", true}, {"logprobs", true}}), "stream: log-probabilities are not streamed; ask without stream"},
      {with_messages({{"stream", "yes"}}), "stream must be a boolean value"},
  };
  for (const auto& [body, message] : cases) EXPECT_EQ(chat_error(body), message) << body.dump();
  // OpenAI's error object names the field the message starts with.
  EXPECT_EQ(openai_error(400, chat_error(cases[4].first))["error"]["param"], "messages");
  EXPECT_EQ(openai_error(400, chat_error(cases[15].first))["error"]["param"], "top_logprobs");
}

// The scripted model writes "cde\nqf..." after the prompt "ab"; "\nq" plays a template's end of turn.
struct ScriptedChat {
  ScriptedRunner runner{"..cde\nqfg"};
  CharTokenizer tok;
  TextRequest request;
  std::vector<Generation> generations;
  explicit ScriptedChat(json body) {
    ChatRequest chat = parse_chat_request(with_messages(std::move(body)), {});
    chat.text.prompt_ids.assign(static_cast<size_t>(chat.n), tok.encode("ab"));
    chat.text.options.stop_strings.push_back("\nq");
    request = chat.text;
    GenerationOptions options = request.options;
    options.sampling.eod = tok.eod();
    generations = generate(runner, request.prompt_ids, options, &tok);
  }
  json response() const { return chat_completion_response(generations, request, tok, {"tiny", 0, 64}, "chatcmpl-1", 9); }
};

TEST(ChatResponse, IsOpenAisObjectWithTheReplyBeforeTheStop) {
  const json out = ScriptedChat({{"max_tokens", 8}, {"temperature", 0}, {"n", 2}}).response();
  EXPECT_EQ(out["object"], "chat.completion");
  EXPECT_EQ(out["id"], "chatcmpl-1");
  EXPECT_EQ(out["model"], "tiny");
  ASSERT_EQ(out["choices"].size(), 2u);
  EXPECT_EQ(out["choices"][1]["index"], 1);
  EXPECT_EQ(out["choices"][0]["message"], json({{"role", "assistant"}, {"content", "cde"}}));
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(out["choices"][0]["logprobs"].is_null());
  // The prompt of the n choices once; each choice's tokens up to and with the stop string's.
  EXPECT_EQ(out["usage"], json({{"prompt_tokens", 2}, {"completion_tokens", 10}, {"total_tokens", 12}}));
  const json ran_out = ScriptedChat({{"max_tokens", 2}, {"temperature", 0}}).response();
  EXPECT_EQ(ran_out["choices"][0]["message"]["content"], "cd");
  EXPECT_EQ(ran_out["choices"][0]["finish_reason"], "length");
}

TEST(ChatResponse, LogprobsAreTheReplysTokens) {
  const json out = ScriptedChat({{"max_tokens", 8}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}}).response();
  const json& content = out["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);  // c, d, e: not the stop string's tokens
  const double scripted = 10 - std::log(std::exp(10.0) + 19);
  EXPECT_EQ(content[0]["token"], "c");
  EXPECT_NEAR(content[0]["logprob"].get<double>(), scripted, 1e-5);
  EXPECT_EQ(content[0]["bytes"], json({99}));
  ASSERT_EQ(content[2]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[2]["top_logprobs"][0]["token"], "e");
  EXPECT_EQ(content[2]["top_logprobs"][0]["logprob"], content[2]["logprob"]);
}

// The data of each event of a stream.
std::vector<std::string> events_of(const std::string& stream) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t end; (end = stream.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string event = stream.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    out.push_back(event.substr(6));
  }
  EXPECT_EQ(at, stream.size());
  return out;
}

std::string streamed(const ScriptedChat& chat) {
  EventStreamWriter writer(chat.request, chat.request.prompt_ids, chat.tok, {"tiny", 0, 64}, "chatcmpl-2", 9);
  std::string out = writer.start();
  const Generation& g = chat.generations[0];
  for (size_t t = static_cast<size_t>(g.prompt_length); t < g.tokens.size(); ++t) out += writer.token(0, g.tokens[t]);
  EXPECT_FALSE(writer.all_finished());
  out += writer.finished(0, g);
  EXPECT_TRUE(writer.all_finished());
  return out + writer.end();
}

TEST(ChatStream, ChunksAddUpToTheWholeReplyThenDone) {
  const ScriptedChat chat({{"max_tokens", 8}, {"temperature", 0}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  const std::vector<std::string> events = events_of(streamed(chat));
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  std::string text;
  json finish = nullptr;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null());
    text += chunk["choices"][0]["delta"].value("content", "");
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  // "\n" could begin the stop string: it was held back, and the reply leaves it out.
  EXPECT_EQ(text, chat.response()["choices"][0]["message"]["content"]);
  EXPECT_EQ(finish, "stop");
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"], chat.response()["usage"]);
}

TEST(CompletionsStream, ChunksAddUpToTheWholeText) {
  ScriptedRunner runner("..cde\nqfg");
  CharTokenizer tok;
  TextRequest r = parse_openai_completions_request({{"prompt", "ab"}, {"max_tokens", 6}, {"temperature", 0},
                                                    {"stop", "f"}, {"stream", true}}, {});
  const std::vector<std::vector<int32_t>> prompts = tokenize_prompts(r, tok, runner.config());
  GenerationOptions options = r.options;
  options.sampling.eod = tok.eod();
  const Generation g = generate(runner, prompts, options, &tok)[0];
  EventStreamWriter writer(r, prompts, tok, {"tiny", 0, 64}, "cmpl-3", 9);
  std::string out = writer.start();
  EXPECT_EQ(out, "");  // no role chunk outside chat
  for (size_t t = static_cast<size_t>(g.prompt_length); t < g.tokens.size(); ++t) out += writer.token(0, g.tokens[t]);
  out += writer.finished(0, g) + writer.end();
  const std::vector<std::string> events = events_of(out);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_FALSE(chunk.contains("usage"));  // only with stream_options.include_usage
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "cde\nq");
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "stop");
  const std::string failed = writer.failed(500, "boom");
  EXPECT_EQ(json::parse(events_of(failed)[0])["error"]["message"], "boom");
}

// What the server does when a streamed request's client leaves: its sequence is dropped between two steps,
// its cache blocks are free at once, and the other sequences go on as they would have.
TEST(StreamCancel, ADroppedSequenceFreesItsBlocksAndTheOthersGoOn) {
  ScriptedRunner runner("..cde\nqfg");
  CharTokenizer tok;
  auto options = std::make_shared<GenerationOptions>();
  options->sampling.tokens_to_generate = 5;
  options->sampling.temperature = 0;
  options->sampling.top_k = 1;
  options->sampling.eod = tok.eod();
  BatchDecoder decoder(runner, 4, 4, &tok);  // each sequence takes 2 blocks of 4 (2 + 5 positions)
  const int64_t leaving = decoder.add({tok.encode("ab"), options, 0});
  const int64_t staying = decoder.add({tok.encode("ab"), options, 1});
  EXPECT_EQ(decoder.cache().free_blocks(), 0);
  EXPECT_TRUE(decoder.step().empty());
  EXPECT_TRUE(decoder.cancel(leaving));
  EXPECT_FALSE(decoder.cancel(leaving));
  EXPECT_EQ(decoder.cache().free_blocks(), 2);
  EXPECT_EQ(decoder.active(), 1);
  std::vector<BatchDecoder::Finished> done;
  while (decoder.active() > 0)
    for (BatchDecoder::Finished& f : decoder.step()) done.push_back(std::move(f));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, staying);
  EXPECT_EQ(tok.decode(done[0].generation.tokens), "abcde\nq");
  EXPECT_EQ(decoder.cache().free_blocks(), 4);
}

TEST(TokenChannel, PassesEventsAndCancelsOnce) {
  int wakes = 0;
  TokenChannel channel([&] { ++wakes; });
  EXPECT_TRUE(channel.wait(std::chrono::milliseconds(1)).empty());
  channel.push({TokenChannel::Event::Kind::Token, 1, 7, {}, 0, ""});
  const std::vector<TokenChannel::Event> events = channel.wait(std::chrono::milliseconds(1));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].prompt, 1u);
  EXPECT_EQ(events[0].token, 7);
  channel.cancel();
  channel.cancel();
  EXPECT_TRUE(channel.cancelled());
  EXPECT_EQ(wakes, 1);
}

}  // namespace
}  // namespace tessera::infer
