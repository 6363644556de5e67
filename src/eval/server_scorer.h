// Scores token sequences through a running OpenAI-compatible server (`tessera serve`), for
// `tessera eval --server-url`: each sample goes out as lm-evaluation-harness's local-completions sends a
// loglikelihood request (the token ids as the prompt, `echo`, `logprobs` 1, `max_tokens` 0), and the
// answer's prompt log-probs become the scores the local evaluation reads from the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eval/zeroshot_evaluation.h"

namespace httplib { class Client; }

namespace tessera::eval {

// A sequence's scores: for i in [0, n-1), the log-prob of tokens[i + 1] after tokens[0..i] and whether
// it was the most likely next token (the server's top log-prob equals its own, as docs/serving.md says
// they are the same number bit for bit).
struct SequenceScores {
  std::vector<double> logprob;
  std::vector<uint8_t> greedy;
};

class ServerScorer {
 public:
  // `url`: http://HOST:PORT with an optional trailing slash (or a path ending /v1). Checks the form
  // (naming the flag, the value and the rule) and that the server answers GET /v1/models, naming the URL
  // when it does not.
  explicit ServerScorer(const std::string& url);
  ~ServerScorer();

  // The served model's name and its longest sequence (/tokenizer_info's max_model_len, 0 if absent).
  const std::string& model() const { return model_; }
  int64_t max_model_len() const { return max_model_len_; }

  SequenceScores score(const std::vector<int32_t>& tokens) const;

 private:
  std::string url_, base_path_, model_;
  int64_t max_model_len_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

// A BatchScorer (zeroshot_evaluation.h) asking `server` for each row of the micro-batch: its inputs and
// its last label as the prompt. Where a label was not the most likely token its argmax is -1.
BatchScorer server_batch_scorer(const ServerScorer& server);

// The host part and the path prefix of a --server-url ("http://127.0.0.1:5000/v1" -> host
// "http://127.0.0.1:5000", prefix ""), or an error naming the rule.
void split_server_url(const std::string& url, std::string* host, std::string* prefix);

}  // namespace tessera::eval
