#include "infer/model_runner.h"

#include <algorithm>
#include <cmath>

namespace tessera::infer {
namespace {

class GptRunner final : public ModelRunner {
 public:
  GptRunner(const model::GptModel& model, const parallel::TensorParallelContext& tp) : model_(model), tp_(tp) {}

  const model::GptConfig& config() const override { return model_.config(); }

  DecodeSequence start(int64_t capacity) const override { return {model_.start_decoding(capacity)}; }

  Tensor next_token_logits(const std::vector<int32_t>& tokens, DecodeSequence& seq) const override {
    return model_.next_token_logits(tokens, seq.state);
  }

  void agree(std::vector<int32_t>& values) const override {
    if (tp_.size() == 1 || values.empty()) return;
    Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::I32);
    std::copy(values.begin(), values.end(), t.i32());
    tp_.group->broadcast(t, 0);
    std::copy(t.i32(), t.i32() + t.numel(), values.begin());
  }

  Scores score(const model::MicroBatch& batch) const override {
    const model::GptConfig& c = config();
    model::ForwardContext ctx;
    ctx.training = false;
    ctx.batch = batch.tokens.dim(0);
    ctx.seq = batch.tokens.dim(1);
    model::MicroBatch b = batch;
    if (!b.loss_mask.defined()) b.loss_mask = Tensor::zeros({ctx.batch, ctx.seq});
    model::GptActivations rec;
    model_.forward(b, ctx, rec);

    // rec.logits holds this rank's vocabulary shard [vocab_begin, vocab_begin + local) of each row
    // (rows in [seq, batch] order); rec.lse is already reduced over the tensor group.
    const int64_t rows = ctx.seq * ctx.batch, local = c.padded_vocab_size / tp_.size();
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

    Scores s;
    s.label_logprob.resize(rows);
    s.argmax.resize(rows);
    for (int64_t t = 0; t < rows; ++t) {
      int64_t out = (t % ctx.batch) * ctx.seq + t / ctx.batch;  // [seq, batch] row -> [batch, seq]
      s.label_logprob[out] = static_cast<double>(target.f32()[t]) - rec.lse.f32()[t];
      int64_t winner = 0;
      for (int64_t r = 1; r < tp_.size(); ++r)
        if (best.f32()[r * 2 * rows + 2 * t] > best.f32()[winner * 2 * rows + 2 * t]) winner = r;
      s.argmax[out] = static_cast<int32_t>(best.f32()[winner * 2 * rows + 2 * t + 1]);
    }
    return s;
  }

 private:
  const model::GptModel& model_;
  const parallel::TensorParallelContext& tp_;
};

}  // namespace

std::unique_ptr<ModelRunner> make_gpt_runner(const model::GptModel& model, const parallel::TensorParallelContext& tp) {
  return std::make_unique<GptRunner>(model, tp);
}

}  // namespace tessera::infer
