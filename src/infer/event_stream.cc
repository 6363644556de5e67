#include "infer/event_stream.h"

#include <algorithm>

#include "infer/openai_chat.h"

namespace tessera::infer {
namespace {

using nlohmann::json;

std::string sse_event(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// The length of `text`'s longest prefix that ends on a whole UTF-8 character (a token may end inside one:
// its bytes go out with the token that completes it).
size_t whole_utf8_prefix(const std::string& text) {
  size_t lead = text.size();
  for (size_t back = 0; back < 4 && lead > 0; ++back) {
    const unsigned char c = static_cast<unsigned char>(text[lead - 1]);
    if ((c & 0xC0) != 0x80) {  // the last character's first byte
      --lead;
      const size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
      return text.size() - lead >= need ? text.size() : lead;
    }
    --lead;
  }
  return text.size();  // not UTF-8 there: nothing to wait for
}

// How much of `text` is final: before the first stop string, and without an end that a stop string
// could still begin with (the reply would leave that text out).
size_t final_prefix(const std::string& text, const std::vector<std::string>& stops) {
  size_t end = text.size();
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    const size_t at = text.find(s);
    if (at != std::string::npos) end = std::min(end, at);
  }
  for (const std::string& s : stops)
    for (size_t n = s.empty() ? 0 : std::min(s.size() - 1, end); n > 0; --n)
      if (text.compare(end - n, n, s, 0, n) == 0) {
        end -= n;
        break;
      }
  return std::min(end, whole_utf8_prefix(text.substr(0, end)));
}

}  // namespace

void TokenChannel::push(Event event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  changed_.notify_all();
}

std::vector<TokenChannel::Event> TokenChannel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !events_.empty(); });
  std::vector<Event> out(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

void TokenChannel::cancel() {
  if (cancelled_.exchange(true)) return;
  changed_.notify_all();
  if (wake_) wake_();
}

EventStreamWriter::EventStreamWriter(const TextRequest& request, std::vector<std::vector<int32_t>> prompts,
                                     const data::Tokenizer& tokenizer, ServedModel model, std::string id,
                                     int64_t created)
    : request_(request), prompts_(std::move(prompts)), tokenizer_(tokenizer), model_(std::move(model)),
      id_(std::move(id)), created_(created), choices_(prompts_.size()) {}

std::string EventStreamWriter::chunk(size_t index, const std::string& text, const char* finish_reason, bool role) const {
  const bool chat = request_.kind == TextRequest::Kind::Chat;
  json choice = {{"index", index}};
  if (chat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (role || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  json out = {{"id", id_}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created_},
              {"model", model_.name}, {"choices", json::array({choice})}};
  if (request_.stream_usage) out["usage"] = nullptr;  // as OpenAI's: only the last chunk counts
  return sse_event(out);
}

std::string EventStreamWriter::start() {
  if (request_.kind != TextRequest::Kind::Chat) return "";
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i) out += chunk(i, "", nullptr, true);
  return out;
}

std::string EventStreamWriter::token(size_t prompt, int32_t token) {
  Choice& c = choices_.at(prompt);
  c.generated.push_back(token);
  const GenerationOptions& o = request_.options;
  // A final end-of-document or stop id is not the model's text; the finished event ends the choice.
  if (c.done || token == tokenizer_.eod() || std::find(o.stop_ids.begin(), o.stop_ids.end(), token) != o.stop_ids.end())
    return "";
  const std::string text = continuation_text(tokenizer_, prompts_[prompt], c.generated);
  const size_t ready = final_prefix(text, o.stop_strings);
  if (ready <= c.sent.size() || text.compare(0, c.sent.size(), c.sent) != 0) return "";
  const std::string delta = text.substr(c.sent.size(), ready - c.sent.size());
  c.sent += delta;
  return chunk(prompt, delta, nullptr);
}

std::string EventStreamWriter::finished(size_t prompt, const Generation& g) {
  Choice& c = choices_.at(prompt);
  c.done = true;
  c.prompt_tokens = g.prompt_length;
  c.completion_tokens = static_cast<int64_t>(g.tokens.size()) - g.prompt_length;
  std::string text;
  bool stopped;
  if (request_.kind == TextRequest::Kind::Chat) {
    const ReplyText reply = reply_text(g, request_.options, tokenizer_);
    text = reply.text;
    stopped = reply.stopped;
  } else {
    const json choice = openai_completion_choice(prompt, g, request_, tokenizer_);
    text = choice["text"].get<std::string>();
    stopped = choice["finish_reason"] == "stop";
  }
  // What was sent is a prefix of the whole text (decoding more tokens only appends); the rest goes now.
  const std::string rest = text.compare(0, c.sent.size(), c.sent) == 0 ? text.substr(c.sent.size()) : std::string();
  const char* reason = stopped ? "stop" : "length";
  if (request_.kind != TextRequest::Kind::Chat) return chunk(prompt, rest, reason);
  return (rest.empty() ? std::string() : chunk(prompt, rest, nullptr)) + chunk(prompt, "", reason);
}

bool EventStreamWriter::all_finished() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.done; });
}

std::string EventStreamWriter::end() {
  std::string out;
  if (request_.stream_usage) {
    int64_t prompt = 0, completion = 0;
    for (const Choice& c : choices_) {
      // A chat's n choices share one prompt (counted once); /v1/completions' prompts are each counted.
      prompt = request_.kind == TextRequest::Kind::Chat ? c.prompt_tokens : prompt + c.prompt_tokens;
      completion += c.completion_tokens;
    }
    const bool chat = request_.kind == TextRequest::Kind::Chat;
    out += sse_event({{"id", id_}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", created_}, {"model", model_.name}, {"choices", json::array()},
                      {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", completion},
                                 {"total_tokens", prompt + completion}}}});
  }
  return out + "data: [DONE]\n\n";
}

std::string EventStreamWriter::failed(int status, const std::string& message) {
  return sse_event(openai_error(status, message)) + "data: [DONE]\n\n";
}

void serve_event_stream(httplib::Response& res, std::shared_ptr<TokenChannel> channel,
                        std::shared_ptr<EventStreamWriter> writer, std::function<bool()> client_gone) {
  res.set_header("Cache-Control", "no-cache");
  auto started = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [channel, writer, client_gone, started](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& text) { return text.empty() || sink.write(text.data(), text.size()); };
        // A failed write means the client went away: its sequences are dropped before the next step.
        auto gone = [&] {
          channel->cancel();
          return false;
        };
        if (!*started) {
          *started = true;
          if (!send(writer->start())) return gone();
        }
        for (;;) {
          std::vector<TokenChannel::Event> events = channel->wait(std::chrono::milliseconds(50));
          if (events.empty()) {
            // Waiting (to join the batch, or for a slow step): a client that closed its connection is
            // noticed here rather than at the next write.
            if (client_gone()) return gone();
            continue;
          }
          std::string out;
          bool over = false;
          for (TokenChannel::Event& e : events) {
            if (e.kind == TokenChannel::Event::Kind::Token) {
              out += writer->token(e.prompt, e.token);
            } else if (e.kind == TokenChannel::Event::Kind::Finished) {
              out += writer->finished(e.prompt, e.generation);
              if (writer->all_finished()) out += writer->end(), over = true;
            } else {
              out += writer->failed(e.status, e.error);
              over = true;
            }
            if (over) break;
          }
          if (!send(out)) return gone();
          if (over) sink.done();
          return true;
        }
      },
      [channel](bool success) {
        if (!success) channel->cancel();
      });
}

}  // namespace tessera::infer
