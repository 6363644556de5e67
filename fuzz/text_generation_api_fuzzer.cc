// libFuzzer target: the request parsers of `tessera serve` (PUT /api and POST /completions), without
// HTTP. Input: byte 0 picks the endpoint, the rest is the request body, parsed as the server does
// (json::parse; a malformed body is answered 400 there). A parsed body must give a TextRequest or a
// RequestError, never a crash or another exception; an accepted request must parse the same after the
// JSON round trip the server makes to send it to the other ranks, and its prompts must tokenize (a
// NullTokenizer) or be refused with a RequestError. Built and run by scripts/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/check.h"
#include "data/null_tokenizer.h"
#include "infer/text_generation_api.h"

namespace tessera::infer {
// The parsers never generate; run_text_request's call is linked to this stand-in, so that the target
// need not link the model.
std::vector<Generation> generate(const ModelRunner&, const std::vector<std::vector<int32_t>>&,
                                 const GenerationOptions&, const data::Tokenizer*,
                                 const std::function<void(size_t, int32_t)>&, int64_t) {
  std::abort();
}
}  // namespace tessera::infer

namespace {

using nlohmann::json;
using tessera::infer::TextRequest;

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "text_generation_api_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

bool same(const TextRequest& a, const TextRequest& b) {
  const auto &x = a.options, &y = b.options;
  return a.kind == b.kind && a.prompts == b.prompts && a.prompt_ids == b.prompt_ids && a.add_bos == b.add_bos &&
         a.echo == b.echo && a.no_log == b.no_log && x.return_logprobs == y.return_logprobs &&
         x.stop_on_eol == y.stop_on_eol && x.stop_on_double_eol == y.stop_on_double_eol &&
         x.stop_strings == y.stop_strings && x.sampling.tokens_to_generate == y.sampling.tokens_to_generate &&
         x.sampling.temperature == y.sampling.temperature && x.sampling.top_k == y.sampling.top_k &&
         x.sampling.top_p == y.sampling.top_p && x.sampling.random_seed == y.sampling.random_seed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::infer;
  if (size == 0) return 0;
  const bool api = data[0] & 1;
  json body = json::parse(reinterpret_cast<const char*>(data) + 1, reinterpret_cast<const char*>(data) + size,
                          nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  ServerLimits limits;
  limits.max_prompts = 8;
  limits.max_tokens_to_generate = 64;
  auto parse = [&](const json& b) { return api ? parse_api_request(b, limits) : parse_completions_request(b, limits); };
  TextRequest r;
  try {
    r = parse(body);
  } catch (const RequestError&) {
    return 0;
  }
  require(static_cast<int64_t>(r.prompts.size() + r.prompt_ids.size()) >= 1, "an accepted request has a prompt");
  require(static_cast<int64_t>(r.prompts.size() + r.prompt_ids.size()) <= limits.max_prompts, "max_prompts holds");
  require(r.options.sampling.tokens_to_generate >= 0 &&
              r.options.sampling.tokens_to_generate <= limits.max_tokens_to_generate,
          "tokens_to_generate is within the limit");
  require(r.options.sampling.top_k >= 0 && r.options.sampling.top_p >= 0 && r.options.sampling.top_p <= 1,
          "top_k and top_p are in range");
  // generate() validates the options again (infer::validate); what the parser accepts must pass it.
  require(r.options.sampling.top_k == 0 || r.options.sampling.top_p == 0, "not both top_k and top_p");
  require(r.options.sampling.temperature >= 0 && r.options.sampling.temperature <= 100, "temperature is in range");
  // Token-id prompts are the body's ids, unchanged.
  if (!api && !r.prompt_ids.empty()) {
    const json& p = body["prompt"];
    const bool nested = p[0].is_array();
    for (size_t i = 0; i < r.prompt_ids.size(); ++i) {
      const json& ids = nested ? p[i] : p;
      require(ids.size() == r.prompt_ids[i].size(), "a token-id prompt keeps its length");
      for (size_t k = 0; k < ids.size(); ++k)
        require(ids[k].is_number_integer() && ids[k] == json(static_cast<int64_t>(r.prompt_ids[i][k])),
                "a token-id prompt keeps its ids");
    }
  }
  // The server sends the body to the other ranks as text (json::dump) and they parse it again.
  try {
    require(same(parse(json::parse(body.dump())), r), "the body parses the same after dump and parse");
  } catch (const RequestError&) {
    require(false, "the body parses the same after dump and parse");
  }
  tessera::data::NullTokenizer tokenizer(1000);
  tessera::model::ModelConfig config;
  config.max_position_embeddings = 128;
  try {
    for (const auto& ids : tokenize_prompts(r, tokenizer, config))
      for (int32_t id : ids) require(id >= 0 && id < tokenizer.vocab_size(), "prompt ids are in the vocabulary");
  } catch (const RequestError&) {
  }
  return 0;
}
