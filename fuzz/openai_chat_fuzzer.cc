// libFuzzer target: the chat request parser of `tessera serve` (POST /v1/chat/completions) with its chat
// template applied, and the reading of a model's Jinja chat_template (outside input: a checkpoint's
// tokenizer_config.json). Input: byte 0 picks what the rest is: even, a request body (json::parse, as the
// server does), through the template (byte 0 >> 1) % 3; odd, a Jinja text. A request gives a ChatRequest or
// a RequestError; an accepted one keeps its bounds and parses the same after the JSON round trip the
// server makes to send it to the other ranks. A Jinja text is recognised or refused with a tessera::Error,
// never a crash or another exception. Built and run by scripts/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/check.h"
#include "data/null_tokenizer.h"
#include "infer/openai_chat.h"

namespace tessera::infer {
// Neither is reached from the parsers; stand-ins so that the target need not link the model.
std::vector<Generation> generate(const ModelRunner&, const std::vector<std::vector<int32_t>>&,
                                 const GenerationOptions&, const data::Tokenizer*,
                                 const std::function<void(size_t, int32_t)>&, int64_t) {
  std::abort();
}
std::string continuation_text(const data::Tokenizer&, std::span<const int32_t>, std::span<const int32_t>) {
  std::abort();
}
}  // namespace tessera::infer

namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "openai_chat_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::infer;
  using nlohmann::json;
  if (size == 0) return 0;
  const char* text = reinterpret_cast<const char*>(data) + 1;
  if (data[0] & 1) {
    try {
      recognise_chat_template(std::string(text, size - 1), "fuzz");
    } catch (const tessera::Error&) {
    }
    return 0;
  }
  const json body = json::parse(text, text + size - 1, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  ServerLimits limits;
  limits.max_prompts = 8;
  limits.max_tokens_to_generate = 64;
  limits.max_prompt_tokens = 256;
  limits.max_prompt_bytes = 1024;
  ChatRequest chat;
  try {
    chat = parse_chat_request(body, limits);
  } catch (const RequestError&) {
    return 0;
  }
  require(!chat.messages.empty(), "an accepted request has a message");
  require(chat.n >= 1 && chat.n <= limits.max_prompts, "n is within --max-prompts");
  const SamplingOptions& s = chat.text.options.sampling;
  require(s.tokens_to_generate >= 1 && s.tokens_to_generate <= limits.max_tokens_to_generate, "max_tokens is in range");
  require(s.top_k == 0 || s.top_p == 0, "not both top_k and top_p");
  require(!chat.text.stream || !chat.text.options.return_logprobs, "no streamed log-probs");
  for (const ChatMessage& m : chat.messages)
    require(m.role == "system" || m.role == "user" || m.role == "assistant", "a known role");
  try {
    const ChatRequest again = parse_chat_request(json::parse(body.dump()), limits);
    require(again.messages.size() == chat.messages.size() && again.n == chat.n &&
                again.text.options.stop_strings == chat.text.options.stop_strings,
            "the body parses the same after dump and parse");
  } catch (const RequestError&) {
    require(false, "the body parses the same after dump and parse");
  }
  // The NullTokenizer reads numbers only: most conversations are refused as untokenizable, never crash.
  tessera::data::NullTokenizer tokenizer(1000);
  const ChatTemplateKind kinds[] = {ChatTemplateKind::Plain, ChatTemplateKind::ChatMl, ChatTemplateKind::Llama3};
  const ChatTemplate chat_template(kinds[(data[0] >> 1) % 3], tokenizer);
  try {
    apply_chat_template(chat, chat_template, limits, 128);
    require(static_cast<int64_t>(chat.text.prompt_ids.size()) == chat.n, "one prompt per choice");
  } catch (const RequestError&) {
  }
  return 0;
}
