#include "infer/server_batch.h"

#include "infer/openai_chat.h"

#include <cstdio>

namespace tessera::infer {

RequestSequences prepare_request(const std::string& kind, const nlohmann::json& body, const LoadedModel& model,
                                 const ServerLimits& limits, const ChatSetup& chat) {
  RequestSequences r;
  if (kind == "chat") {
    if (!chat.chat) reject_request(chat.unavailable);
    ChatRequest c = parse_chat_request(body, limits);
    apply_chat_template(c, *chat.chat, limits, chat.max_model_len);
    r.request = std::move(c.text);
  } else {
    r.request = kind == "api"           ? parse_api_request(body, limits)
                : kind == "completions" ? parse_completions_request(body, limits)
                                        : parse_openai_completions_request(body, limits);
  }
  try {
    r.prompts = tokenize_prompts(r.request, model.tokenizer(), model.config(), limits);
  } catch (const RequestError& e) {  // a chat's prompt is its messages: the error names them
    const std::string what = e.what();
    if (kind != "chat") throw;
    reject_request("messages: the conversation's " + (what.rfind("prompt: ", 0) == 0 ? what.substr(8) : what));
  }
  auto options = std::make_shared<GenerationOptions>(r.request.options);
  options->sampling.eod = model.tokenizer().eod();
  r.options = options;
  return r;
}

int64_t cancel_requests(ServingBatch& batch, const std::vector<int64_t>& slots) {
  int64_t dropped = 0;
  for (int64_t slot : slots)
    for (auto it = batch.owner.begin(); it != batch.owner.end();) {
      if (it->second.first != slot) {
        ++it;
        continue;
      }
      dropped += batch.decoder->cancel(it->first) ? 1 : 0;
      it = batch.owner.erase(it);
    }
  return dropped;
}

std::vector<FinishedSequence> run_batch_step(ServingBatch& batch,
                                             const std::vector<std::pair<int64_t, RequestSequences>>& joining,
                                             std::vector<int64_t>& failed, std::string& error,
                                             const std::function<std::unique_ptr<BatchDecoder>()>& fresh,
                                             const std::function<void(int64_t, size_t, int32_t)>& on_token) {
  std::vector<FinishedSequence> done;
  try {
    const BatchDecoder::PrefixStats before = batch.decoder->prefix_stats();
    for (const auto& [slot, r] : joining)
      for (size_t i = 0; i < r.prompts.size(); ++i)
        batch.owner[batch.decoder->add({r.prompts[i], r.options, i})] = {slot, i};
    batch.prefix.queried_tokens += batch.decoder->prefix_stats().queried_tokens - before.queried_tokens;
    batch.prefix.cached_tokens += batch.decoder->prefix_stats().cached_tokens - before.cached_tokens;
    auto token = [&](int64_t id, int32_t t) {
      const auto& [slot, prompt] = batch.owner.at(id);
      on_token(slot, prompt, t);
    };
    std::function<void(int64_t, int32_t)> each_token;
    if (on_token) each_token = token;
    for (BatchDecoder::Finished& f : batch.decoder->step(each_token)) {
      auto [slot, prompt] = batch.owner.at(f.id);
      batch.owner.erase(f.id);
      done.push_back({slot, prompt, std::move(f.generation)});
    }
  } catch (const Error& e) {
    error = e.what();
    for (const auto& [id, owner] : batch.owner) failed.push_back(owner.first);
    for (const auto& [slot, r] : joining) failed.push_back(slot);
    batch.owner.clear();
    batch.decoder = fresh();
  }
  return done;
}

void StepTimes::record(int64_t sequences, bool joined, double model_seconds, double step_seconds,
                       double loop_seconds) {
  for (Sum* sum : {&all_, joined ? &joins_ : &decoding_[sequences]}) {
    ++sum->steps;
    sum->model += model_seconds;
    sum->step += step_seconds;
    sum->loop += loop_seconds;
  }
}

std::string StepTimes::summary() const {
  if (all_.steps == 0) return "";
  auto ms = [](double seconds, int64_t steps) { return 1e3 * seconds / static_cast<double>(steps); };
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "step time: the model's forward %.1f s of %.1f s in steps, %.1f s in the loop",
                all_.model, all_.step, all_.loop);
  std::string text = buffer;
  if (joins_.steps > 0) {
    std::snprintf(buffer, sizeof buffer, "; %lld steps with joins, ms a step (model / step / loop): %.3f / %.3f / %.3f",
                  static_cast<long long>(joins_.steps), ms(joins_.model, joins_.steps), ms(joins_.step, joins_.steps),
                  ms(joins_.loop, joins_.steps));
    text += buffer;
  }
  text += "; steps without joins by sequences:";
  for (const auto& [sequences, sum] : decoding_) {
    std::snprintf(buffer, sizeof buffer, " %lld: %lld x %.3f / %.3f / %.3f;", static_cast<long long>(sequences),
                  static_cast<long long>(sum.steps), ms(sum.model, sum.steps), ms(sum.step, sum.steps),
                  ms(sum.loop, sum.steps));
    text += buffer;
  }
  text.pop_back();
  return text;
}

}  // namespace tessera::infer
