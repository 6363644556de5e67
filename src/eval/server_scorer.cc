#include "eval/server_scorer.h"

#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/check.h"

namespace tessera::eval {

void split_server_url(const std::string& url, std::string* host, std::string* prefix) {
  const std::string rule = ": expected http://HOST:PORT (optionally ending /v1), e.g. http://127.0.0.1:5000";
  TESSERA_CHECK(url.rfind("http://", 0) == 0, "--server-url=", url, rule);
  const size_t path_at = url.find('/', 7);
  *host = url.substr(0, path_at);
  std::string path = path_at == std::string::npos ? "" : url.substr(path_at);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
  TESSERA_CHECK(host->size() > 7 && host->find(':', 7) != std::string::npos && host->back() != ':', "--server-url=",
                url, rule);
  *prefix = path;
}

ServerScorer::ServerScorer(const std::string& url) : url_(url) {
  std::string host;
  split_server_url(url, &host, &base_path_);
  client_ = std::make_unique<httplib::Client>(host);
  TESSERA_CHECK(client_->is_valid(), "--server-url=", url, ": not a URL this client can reach");
  client_->set_connection_timeout(10, 0);
  client_->set_read_timeout(3600, 0);
  httplib::Result models = client_->Get(base_path_ + "/v1/models");
  TESSERA_CHECK(models, "--server-url=", url, ": no server answers there (", httplib::to_string(models.error()),
                "); start one with tessera serve --load CKPT --port PORT");
  TESSERA_CHECK(models->status == 200, "--server-url=", url, ": GET /v1/models answered HTTP ", models->status, ": ",
                models->body);
  const nlohmann::json list = nlohmann::json::parse(models->body, nullptr, /*allow_exceptions=*/false);
  TESSERA_CHECK(list.is_object() && list.contains("data") && !list["data"].empty(), "--server-url=", url,
                ": GET /v1/models lists no model: ", models->body);
  model_ = list["data"][0].value("id", "");
  httplib::Result info = client_->Get(base_path_ + "/tokenizer_info");
  if (info && info->status == 200) {
    const nlohmann::json j = nlohmann::json::parse(info->body, nullptr, false);
    if (j.is_object() && j.contains("max_model_len") && j["max_model_len"].is_number_integer())
      max_model_len_ = j["max_model_len"].get<int64_t>();
  }
}

ServerScorer::~ServerScorer() = default;

SequenceScores ServerScorer::score(const std::vector<int32_t>& tokens) const {
  TESSERA_CHECK(tokens.size() >= 2, "ServerScorer::score: needs at least two tokens");
  const nlohmann::json body = {{"model", model_}, {"prompt", tokens}, {"max_tokens", 0}, {"echo", true},
                               {"logprobs", 1}, {"temperature", 0}};
  httplib::Result res = client_->Post(base_path_ + "/v1/completions", body.dump(), "application/json");
  TESSERA_CHECK(res, "--server-url=", url_, ": no answer to /v1/completions (", httplib::to_string(res.error()), ")");
  TESSERA_CHECK(res->status == 200, "--server-url=", url_, ": /v1/completions answered HTTP ", res->status, ": ",
                res->body);
  const nlohmann::json out = nlohmann::json::parse(res->body);
  const nlohmann::json& lp = out.at("choices").at(0).at("logprobs");
  const nlohmann::json& token_lp = lp.at("token_logprobs");
  const nlohmann::json& top = lp.at("top_logprobs");
  // With max_tokens 0 the answer holds the prompt's tokens only; the first has no log-prob.
  TESSERA_CHECK(token_lp.size() == tokens.size() && top.size() == tokens.size(), "--server-url=", url_,
                ": /v1/completions gave ", token_lp.size(), " log-probs for a prompt of ", tokens.size(), " tokens");
  SequenceScores s;
  s.logprob.resize(tokens.size() - 1);
  s.greedy.resize(tokens.size() - 1);
  for (size_t i = 1; i < tokens.size(); ++i) {
    const double mine = token_lp[i].get<double>();
    double best = mine;
    for (const auto& [text, value] : top[i].items()) best = std::max(best, value.get<double>());
    s.logprob[i - 1] = mine;
    s.greedy[i - 1] = best == mine ? 1 : 0;
  }
  return s;
}

BatchScorer server_batch_scorer(const ServerScorer& server) {
  return [&server](const model::MicroBatch& mb) {
    const int64_t rows = mb.tokens.dim(0), len = mb.tokens.dim(1);
    infer::Scores scores;
    scores.label_logprob.resize(rows * len);
    scores.argmax.resize(rows * len);
    for (int64_t k = 0; k < rows; ++k) {
      const int32_t* tokens = mb.tokens.host_i32() + k * len;
      const int32_t* labels = mb.labels.host_i32() + k * len;
      std::vector<int32_t> sequence(tokens, tokens + len);
      sequence.push_back(labels[len - 1]);
      const SequenceScores s = server.score(sequence);
      for (int64_t t = 0; t < len; ++t) {
        scores.label_logprob[k * len + t] = s.logprob[t];
        scores.argmax[k * len + t] = s.greedy[t] ? labels[t] : -1;
      }
    }
    return scores;
  };
}

}  // namespace tessera::eval
