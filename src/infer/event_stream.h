// OpenAI's streamed responses (`stream: true`): server-sent events over a chunked HTTP response, one
// `data: {...}\n\n` chunk per piece of text as tokens are decoded, then `data: [DONE]\n\n`. The decoding
// thread pushes each request's tokens into its TokenChannel; the request's HTTP thread turns them into
// chunks (EventStreamWriter) and writes them (serve_event_stream). A client that goes away (a write
// fails, or its socket is closed while it waits) cancels the channel, and the server drops its sequences
// and frees their key/value blocks before the next step.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infer/openai_completions.h"

namespace tessera::infer {

class TokenChannel {
 public:
  struct Event {
    enum class Kind { Token, Finished, Failed } kind = Kind::Token;
    size_t prompt = 0;  // Token, Finished: which sequence (choice) of the request
    int32_t token = -1;
    Generation generation;  // Finished
    int status = 0;         // Failed: the HTTP status the whole response would have had
    std::string error;
  };

  // `wake` is called (from the HTTP thread) when the client goes away, to wake the decoding loop.
  explicit TokenChannel(std::function<void()> wake) : wake_(std::move(wake)) {}

  void push(Event event);  // the decoding thread
  // The HTTP thread: the events pushed so far, waiting up to `timeout` for one (empty: none came).
  std::vector<Event> wait(std::chrono::milliseconds timeout);
  void cancel();  // idempotent
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Event> events_;
  std::atomic<bool> cancelled_{false};
  std::function<void()> wake_;
};

// The chunks of one streamed request of /v1/completions (object "text_completion") or
// /v1/chat/completions ("chat.completion.chunk": the first chunk of each choice carries the role, the
// others a delta of content). Text goes out as soon as it is final: not the bytes of an unfinished UTF-8
// character, nor text that may yet turn out to start a stop string; the last chunk of a choice completes
// its text to exactly the non-streamed response's and carries finish_reason.
class EventStreamWriter {
 public:
  EventStreamWriter(const TextRequest& request, std::vector<std::vector<int32_t>> prompts,
                    const data::Tokenizer& tokenizer, ServedModel model, std::string id, int64_t created);

  std::string start();  // chat: each choice's role chunk
  std::string token(size_t prompt, int32_t token);
  std::string finished(size_t prompt, const Generation& generation);
  std::string end();  // the usage chunk (stream_options.include_usage), then [DONE]
  std::string failed(int status, const std::string& message);  // an error object as an event, then [DONE]
  bool all_finished() const;

 private:
  struct Choice {
    std::vector<int32_t> generated;
    std::string sent;
    bool done = false;
    int64_t prompt_tokens = 0, completion_tokens = 0;
  };
  std::string chunk(size_t index, const std::string& text, const char* finish_reason, bool role = false) const;

  TextRequest request_;
  std::vector<std::vector<int32_t>> prompts_;
  const data::Tokenizer& tokenizer_;
  ServedModel model_;
  std::string id_;
  int64_t created_;
  std::vector<Choice> choices_;
};

// Answers `res` with the event stream of `channel`'s events (writer's chunks) through httplib's chunked
// content provider, on the request's HTTP thread. `client_gone` tells whether the client has closed its
// connection (checked while no event comes).
void serve_event_stream(httplib::Response& res, std::shared_ptr<TokenChannel> channel,
                        std::shared_ptr<EventStreamWriter> writer, std::function<bool()> client_gone);

}  // namespace tessera::infer
