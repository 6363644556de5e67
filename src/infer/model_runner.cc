#include "infer/model_runner.h"

#include <algorithm>
#include <cmath>

namespace tessera::infer {
namespace {

class ChunkRunner final : public ModelRunner {
 public:
  ChunkRunner(const model::LanguageModelChunk& model, const parallel::TensorParallelContext& tp, comm::ProcessGroup* pipeline)
      : model_(model), tp_(tp), pipeline_(pipeline && pipeline->size() > 1 ? pipeline : nullptr) {}

  const model::ModelConfig& config() const override { return model_.config(); }

  model::KvPool make_kv_pool(int64_t blocks, int64_t block_size) const override {
    return model_.make_kv_pool(blocks, block_size);
  }

  Tensor decode_step(const std::vector<model::DecodeStep>& steps, model::KvPool& pool) const override {
    int64_t rows = 0;
    for (const model::DecodeStep& s : steps) rows += static_cast<int64_t>(s.tokens.size());
    Tensor input = receive_from_previous_stage({rows, config().hidden_size});
    Tensor out = model_.decode_step(steps, input, pool);
    return from_last_stage(out, {static_cast<int64_t>(steps.size()), config().padded_vocab_size});
  }

  void agree(std::vector<int32_t>& values) const override {
    if ((tp_.size() == 1 && !pipeline_) || values.empty()) return;
    Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::I32);
    std::copy(values.begin(), values.end(), t.host_i32());
    if (tp_.size() > 1) tp_.group->broadcast(t, 0);
    if (pipeline_) pipeline_->broadcast(t, 0);  // tensor rank 0 of stage 0 decides
    std::copy(t.host_i32(), t.host_i32() + t.numel(), values.begin());
  }

  Scores score(const model::MicroBatch& batch) const override {
    model::ForwardContext ctx;
    ctx.training = false;
    ctx.batch = batch.tokens.dim(0);
    ctx.seq = batch.tokens.dim(1);
    const int64_t rows = ctx.seq * ctx.batch;
    Tensor out = model_.score(batch, receive_from_previous_stage({rows, config().hidden_size}), ctx);
    return unpack(from_last_stage(out, {3 * rows}), ctx.batch, ctx.seq);
  }

 private:
  // The previous stage's output (undefined on the first stage or without a pipeline).
  Tensor receive_from_previous_stage(const Shape& shape) const {
    if (!pipeline_ || pipeline_->rank() == 0) return Tensor();
    Tensor t = Tensor::empty(shape);
    pipeline_->recv(t, pipeline_->rank() - 1, 0);
    return t;
  }
  // Sends a non-last stage's output on, then every stage takes the last stage's `result`.
  Tensor from_last_stage(const Tensor& result, const Shape& shape) const {
    if (!pipeline_) return result;
    const int last = pipeline_->size() - 1;
    Tensor t = result;
    if (pipeline_->rank() != last) {
      pipeline_->send(result, pipeline_->rank() + 1, 0);
      t = Tensor::empty(shape);
    }
    pipeline_->broadcast(t, last);
    return t;
  }
  // [seq, batch]-ordered rows of (label logit, log-sum-exp, arg-max) -> sample-major Scores.
  static Scores unpack(const Tensor& results, int64_t batch, int64_t seq) {
    const int64_t rows = batch * seq;
    Scores s;
    s.label_logprob.resize(rows);
    s.argmax.resize(rows);
    for (int64_t t = 0; t < rows; ++t) {
      int64_t out = (t % batch) * seq + t / batch;  // [seq, batch] row -> [batch, seq]
      s.label_logprob[out] = static_cast<double>(results.host_f32()[3 * t]) - results.host_f32()[3 * t + 1];
      s.argmax[out] = static_cast<int32_t>(results.host_f32()[3 * t + 2]);
    }
    return s;
  }

  const model::LanguageModelChunk& model_;
  const parallel::TensorParallelContext& tp_;
  comm::ProcessGroup* pipeline_;  // null without pipeline stages
};

}  // namespace

Tensor ModelRunner::next_token_logits(const std::vector<int32_t>& tokens, DecodeSequence& seq) const {
  model::DecodeState& state = seq.state;
  Tensor logits = decode_step({model::DecodeStep{tokens, state.length, {0}}}, state.pool);
  state.length += static_cast<int64_t>(tokens.size());
  return logits.view({config().padded_vocab_size});
}

std::unique_ptr<ModelRunner> make_model_runner(const model::LanguageModelChunk& model,
                                               const parallel::TensorParallelContext& tp, comm::ProcessGroup* pipeline) {
  return std::make_unique<ChunkRunner>(model, tp, pipeline);
}

}  // namespace tessera::infer
