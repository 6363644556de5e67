// What every rank of `tessera serve` does with the running batch (infer/text_generation_server.h): a
// request prepared from the body rank 0 received (the same tokens everywhere), joined into the batch,
// its sequences dropped when its client leaves, one decoding step. Rank 0 decides; the other ranks
// repeat its commands in the same order, so their collectives never part ways. Private to the server.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "infer/batch_decoder.h"
#include "infer/chat_template.h"
#include "infer/loaded_model.h"
#include "infer/text_generation_api.h"

namespace tessera::infer {

// What every rank does with one request of the batch: its sequences, from the request as rank 0
// received it (with its seed), tokenized the same way everywhere.
struct RequestSequences {
  TextRequest request;
  std::vector<std::vector<int32_t>> prompts;
  std::shared_ptr<const GenerationOptions> options;
};

// The chat template of /v1/chat/completions, or why there is none.
struct ChatSetup {
  const ChatTemplate* chat = nullptr;
  std::string unavailable;
  int64_t max_model_len = 0;
};

// The running batch as every rank holds it; `owner` maps a sequence id to its request's slot and prompt.
// The prefix cache's counts are the server's since it started (a failed step replaces the decoder).
struct ServingBatch {
  std::unique_ptr<BatchDecoder> decoder;
  std::map<int64_t, std::pair<int64_t, size_t>> owner;
  BatchDecoder::PrefixStats prefix;
};

// A finished sequence: its request's slot, its prompt's index and what it generated.
struct FinishedSequence {
  int64_t slot;
  size_t prompt;
  Generation generation;
};

// The server's decoding steps by how many sequences they decoded, for its closing line: a step's time
// split into the model's forward, the rest of BatchDecoder::step (sampling, bookkeeping) and the rest of
// the server's loop (admission, answers, hand-offs to the HTTP threads). Only the steps no request
// joined are kept per size (no prompt is read in them), so they compare with bench_decode_step's.
class StepTimes {
 public:
  void record(int64_t sequences, bool joined, double model_seconds, double step_seconds, double loop_seconds);
  std::string summary() const;  // empty before the first step

 private:
  struct Sum {
    int64_t steps = 0;
    double model = 0, step = 0, loop = 0;
  };
  std::map<int64_t, Sum> decoding_;  // by sequences, steps without joins
  Sum all_, joins_;
};

// The request of endpoint `kind` ("api", "completions", "v1", "chat") from its body, tokenized. Throws
// RequestError (a chat's prompt errors name its messages).
RequestSequences prepare_request(const std::string& kind, const nlohmann::json& body, const LoadedModel& model,
                                 const ServerLimits& limits, const ChatSetup& chat);

// Drops the sequences of the requests in `slots` (their clients went away), freeing their cache blocks;
// every rank does it between the same two steps. Returns how many sequences were dropped.
int64_t cancel_requests(ServingBatch& batch, const std::vector<int64_t>& slots);

// Adds the joining requests' sequences (slots numbered by rank 0), then runs one step, calling
// on_token(slot, prompt, token) for each token sampled (when given). Returns the sequences that finished.
// An Error in the step (the same on every rank) ends every running sequence: `failed` gets their slots,
// `error` the message, and the batch starts empty.
std::vector<FinishedSequence> run_batch_step(ServingBatch& batch,
                                             const std::vector<std::pair<int64_t, RequestSequences>>& joining,
                                             std::vector<int64_t>& failed, std::string& error,
                                             const std::function<std::unique_ptr<BatchDecoder>()>& fresh,
                                             const std::function<void(int64_t, size_t, int32_t)>& on_token = {});

}  // namespace tessera::infer
