#include "infer/model_runner.h"

#include <algorithm>
#include <cmath>

namespace tessera::infer {
namespace {

class GptRunner final : public ModelRunner {
 public:
  GptRunner(const model::GptModel& model, const parallel::TensorParallelContext& tp, comm::ProcessGroup* pipeline)
      : model_(model), tp_(tp), pipeline_(pipeline && pipeline->size() > 1 ? pipeline : nullptr) {}

  const model::ModelConfig& config() const override { return model_.config(); }

  DecodeSequence start(int64_t capacity) const override { return {model_.start_decoding(capacity)}; }

  Tensor next_token_logits(const std::vector<int32_t>& tokens, DecodeSequence& seq) const override {
    if (!pipeline_) return model_.next_token_logits(tokens, seq.state);
    const int64_t n = static_cast<int64_t>(tokens.size());
    Tensor input = receive_from_previous_stage({n, config().hidden_size});
    Tensor out = model_.decode_chunk(tokens, input, seq.state);
    return from_last_stage(out, {config().padded_vocab_size});
  }

  void agree(std::vector<int32_t>& values) const override {
    if ((tp_.size() == 1 && !pipeline_) || values.empty()) return;
    Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::I32);
    std::copy(values.begin(), values.end(), t.i32());
    if (tp_.size() > 1) tp_.group->broadcast(t, 0);
    if (pipeline_) pipeline_->broadcast(t, 0);  // tensor rank 0 of stage 0 decides
    std::copy(t.i32(), t.i32() + t.numel(), values.begin());
  }

  Scores score(const model::MicroBatch& batch) const override {
    const model::ModelConfig& c = config();
    model::ForwardContext ctx;
    ctx.training = false;
    ctx.batch = batch.tokens.dim(0);
    ctx.seq = batch.tokens.dim(1);
    model::MicroBatch b = batch;
    if (!b.loss_mask.defined()) b.loss_mask = Tensor::zeros({ctx.batch, ctx.seq});
    model::GptActivations rec;
    const int64_t rows = ctx.seq * ctx.batch;
    double loss = 0;
    Tensor out = model_.forward_chunk(b, receive_from_previous_stage({rows, c.hidden_size}), ctx, rec, &loss);
    if (!model_.chunk().post_process) {  // the last stage scores; send on and take its results
      Tensor results = from_last_stage(out, {3 * rows});
      return unpack(results, ctx.batch, ctx.seq);
    }

    // rec.logits holds this rank's vocabulary shard [vocab_begin, vocab_begin + local) of each row
    // (rows in [seq, batch] order); rec.lse is already reduced over the tensor group.
    const int64_t local = c.padded_vocab_size / tp_.size();
    const int64_t vocab_begin = tp_.rank() * local;
    Tensor target = Tensor::zeros({rows});
    Tensor best = Tensor::empty({1, 2 * rows});  // per row: max logit of the shard, its global id
    for (int64_t t = 0; t < rows; ++t) {
      const float* logits = rec.logits.f32() + t * local;
      int64_t label = rec.labels.i32()[t] - vocab_begin;
      if (label >= 0 && label < local) target.f32()[t] = logits[label];
      int64_t arg = 0;
      for (int64_t v = 1; v < local; ++v)
        if (logits[v] > logits[arg]) arg = v;  // the first of equal maxima, as torch.argmax
      best.f32()[2 * t] = logits[arg];
      best.f32()[2 * t + 1] = static_cast<float>(vocab_begin + arg);  // exact below 2^24
    }
    if (tp_.size() > 1) {
      parallel::all_reduce_sum(target, *tp_.group);
      best = parallel::gather_rows(best, *tp_.group);  // [tp, 2 * rows], shards in vocabulary order
    }

    // Per row: the label's logit, the log-sum-exp and the arg-max id (exact in fp32 below 2^24).
    Tensor results = Tensor::empty({3 * rows});
    for (int64_t t = 0; t < rows; ++t) {
      int64_t winner = 0;
      for (int64_t r = 1; r < tp_.size(); ++r)
        if (best.f32()[r * 2 * rows + 2 * t] > best.f32()[winner * 2 * rows + 2 * t]) winner = r;
      results.f32()[3 * t] = target.f32()[t];
      results.f32()[3 * t + 1] = rec.lse.f32()[t];
      results.f32()[3 * t + 2] = best.f32()[winner * 2 * rows + 2 * t + 1];
    }
    return unpack(from_last_stage(results, {3 * rows}), ctx.batch, ctx.seq);
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
      s.label_logprob[out] = static_cast<double>(results.f32()[3 * t]) - results.f32()[3 * t + 1];
      s.argmax[out] = static_cast<int32_t>(results.f32()[3 * t + 2]);
    }
    return s;
  }

  const model::GptModel& model_;
  const parallel::TensorParallelContext& tp_;
  comm::ProcessGroup* pipeline_;  // null without pipeline stages
};

}  // namespace

std::unique_ptr<ModelRunner> make_gpt_runner(const model::GptModel& model, const parallel::TensorParallelContext& tp,
                                             comm::ProcessGroup* pipeline) {
  return std::make_unique<GptRunner>(model, tp, pipeline);
}

}  // namespace tessera::infer
