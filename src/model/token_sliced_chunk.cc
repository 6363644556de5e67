#include "model/token_sliced_chunk.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "kernels/token_layout.h"
#include "model/batch_layout.h"

namespace tessera::model {

int64_t SliceKvCache::bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&k, &v, &dk, &dv})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

SliceKvCache& TokenSlice::cache(int64_t layer_number) const {
  TESSERA_CHECK(caches != nullptr && layer_number >= 1 && layer_number <= static_cast<int64_t>(caches->size()),
                "token slice: no key/value cache for layer ", layer_number);
  return (*caches)[static_cast<size_t>(layer_number - 1)];
}

std::vector<int64_t> parse_token_slice_lengths(const std::string& value, int64_t seq_length) {
  TESSERA_CHECK(value != "auto", "--pipeline-token-slices=auto: is chosen by TeraPipe's dynamic program with a "
                "cost model (pipeline/token_slicing_search.h), which its caller supplies; here give a number of equal "
                "slices or the slice lengths");
  std::vector<int64_t> slices;
  size_t at = 0;
  while (at <= value.size()) {
    const size_t comma = std::min(value.find(',', at), value.size());
    const std::string item = value.substr(at, comma - at);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    TESSERA_CHECK(!item.empty() && *end == '\0' && v > 0, "--pipeline-token-slices=", value,
                  ": must be auto, a number of slices, or slice lengths separated by commas (positive integers)");
    slices.push_back(v);
    at = comma + 1;
  }
  if (slices.size() == 1) {  // a count of equal slices
    const int64_t count = slices[0];
    TESSERA_CHECK(count <= seq_length && seq_length % count == 0, "--pipeline-token-slices=", value, ": ", count,
                  " equal slices must divide --seq-length=", seq_length);
    return std::vector<int64_t>(static_cast<size_t>(count), seq_length / count);
  }
  int64_t total = 0;
  for (int64_t l : slices) total += l;
  TESSERA_CHECK(total == seq_length, "--pipeline-token-slices=", value, ": the slice lengths sum to ", total,
                ", not --seq-length=", seq_length);
  return slices;
}

namespace {

// Columns [offset, offset + length) of a [batch, seq] tensor: rows of its [seq, batch] transpose, on its
// device (a micro-batch on a GPU is sliced there, by kernels).
Tensor columns(const Tensor& t, int64_t offset, int64_t length) {
  if (!t.defined()) return t;
  TESSERA_CHECK(t.shape().size() == 2, "token slice of a ", shape_str(t.shape()), " tensor");
  Tensor out = Tensor::empty({t.dim(0), length}, t.dtype(), t.device());
  kernels::transpose_rows(to_seq_major(t).narrow(offset, length), out);
  return out;
}

// The slices' records of one micro-batch, and each layer's cache.
struct SlicedRecord final : ChunkRecord {
  std::vector<std::unique_ptr<ChunkRecord>> slices;
  std::vector<SliceKvCache> caches;
  std::unique_ptr<ChunkRecord> sequence;  // the inner chunk's work over the whole sequence (TokenSlice::sequence)
  bool all_forwarded = false;  // every slice's forward has run (backward may start)
  int64_t bytes() const override {
    int64_t total = 0;
    for (const auto& s : slices) total += s->bytes();
    for (const SliceKvCache& c : caches) total += c.bytes();
    if (sequence) total += sequence->bytes();
    return total;
  }
};

class SlicedChunk final : public TokenSlicedChunk {
 public:
  SlicedChunk(std::unique_ptr<LanguageModelChunk> inner, std::vector<int64_t> slices)
      : inner_(std::move(inner)), slices_(std::move(slices)) {
    TESSERA_CHECK(inner_->causal_language_model(), "--pipeline-token-slices needs a causal model (GPT)");
    int64_t total = 0;
    for (int64_t l : slices_) {
      TESSERA_CHECK(l > 0, "--pipeline-token-slices: a slice of ", l, " tokens");
      total += l;
    }
    TESSERA_CHECK(total == inner_->config().seq_length, "--pipeline-token-slices: the slice lengths sum to ", total,
                  ", not --seq-length=", inner_->config().seq_length);
    int64_t offset = 0;
    for (int64_t l : slices_) offsets_.push_back(std::exchange(offset, offset + l));
  }

  const ModelConfig& config() const override { return inner_->config(); }
  const ModelChunk& chunk() const override { return inner_->chunk(); }
  void set_recompute(const Recompute& r) override { inner_->set_recompute(r); }
  bool causal_language_model() const override { return true; }
  std::vector<std::string> auxiliary_loss_names() const override { return inner_->auxiliary_loss_names(); }
  Parameter* tied_word_embedding() const override { return inner_->tied_word_embedding(); }
  std::unique_ptr<ChunkRecord> make_record() const override { return std::make_unique<SlicedRecord>(); }
  const std::vector<int64_t>& slice_lengths() const override { return slices_; }

  // The whole micro-batch: its slices one after another (the input and output are the whole sequence's
  // rows; a later chunk's sequence-parallel shard is not cut into slices here).
  Tensor forward(const MicroBatch& batch, const Tensor& input, const ForwardContext& context, ChunkRecord& record,
                 LossSums& losses, const ParamHooks& hooks) const override {
    check_context(context);
    const int64_t rows_per_token = context.batch, hidden = config().hidden_size;
    TESSERA_CHECK(!input.defined() || input.dim(0) == context.seq * rows_per_token, "--pipeline-token-slices: a "
                  "later pipeline chunk's input of ", input.dim(0), " rows (sequence-parallel shards are sliced by "
                  "the pipeline schedule, not here)");
    Tensor output;
    for (size_t i = 0; i < slices_.size(); ++i) {
      const int64_t offset = offsets_[i], length = slices_[i];
      Tensor in = input.defined() ? input.narrow(offset * rows_per_token, length * rows_per_token) : input;
      Tensor out = forward_slice(static_cast<int>(i), batch, in, context, record, losses, hooks);
      if (out.defined()) {  // a later chunk's input: the slices' outputs in sequence order
        if (!output.defined())
          output = Tensor::empty({context.seq * rows_per_token, hidden}, out.dtype(), out.device());
        output.narrow(offset * rows_per_token, length * rows_per_token).copy_from(out);
      }
    }
    return output;
  }

  Tensor backward(ChunkRecord& record, const Tensor& doutput, const ForwardContext& context, float grad_scale,
                  const ParamHooks& hooks) const override {
    check_context(context);
    const int64_t rows_per_token = context.batch, hidden = config().hidden_size;
    Tensor dinput;
    for (size_t i = slices_.size(); i-- > 0;) {
      const int64_t offset = offsets_[i], length = slices_[i];
      Tensor dout =
          doutput.defined() ? doutput.narrow(offset * rows_per_token, length * rows_per_token) : doutput;
      Tensor dx = backward_slice(static_cast<int>(i), record, dout, context, grad_scale, hooks);
      if (dx.defined()) {
        if (!dinput.defined())
          dinput = Tensor::empty({context.seq * rows_per_token, hidden}, dx.dtype(), dx.device());
        dinput.narrow(offset * rows_per_token, length * rows_per_token).copy_from(dx);
      }
    }
    return dinput;
  }

  Tensor forward_slice(int i, const MicroBatch& batch, const Tensor& input, const ForwardContext& context,
                       ChunkRecord& record, LossSums& losses, const ParamHooks& hooks) const override {
    auto& rec = static_cast<SlicedRecord&>(record);
    check_context(context);
    check_slice(i);
    TESSERA_CHECK(!batch.doc_start.defined(), "--pipeline-token-slices does not support document masks "
                  "(--reset-attention-mask) yet");
    TESSERA_CHECK(static_cast<int>(rec.slices.size()) == i, "token slice ", i, "'s forward after ", rec.slices.size(),
                  " slices' (the slices of a micro-batch run forward in order)");
    if (i == 0) rec.caches.assign(static_cast<size_t>(config().num_layers), SliceKvCache()), rec.sequence.reset();
    const int64_t offset = offsets_[static_cast<size_t>(i)], length = slices_[static_cast<size_t>(i)];
    TokenSlice slice{offset, context.seq, &rec.caches, &batch, &rec.sequence};
    ForwardContext ctx = context;
    ctx.seq = length;
    ctx.token_slice = &slice;
    const MicroBatch part = token_slice_of(batch, offset, length);
    rec.slices.push_back(inner_->make_record());
    rec.all_forwarded = rec.slices.size() == slices_.size();
    return inner_->forward(part, input, ctx, *rec.slices.back(), losses, hooks);
  }

  Tensor backward_slice(int i, ChunkRecord& record, const Tensor& doutput, const ForwardContext& context,
                        float grad_scale, const ParamHooks& hooks) const override {
    auto& rec = static_cast<SlicedRecord&>(record);
    check_context(context);
    check_slice(i);
    TESSERA_CHECK(rec.all_forwarded && rec.slices.size() == static_cast<size_t>(i) + 1,
                  "token slice ", i, "'s backward out of order (the slices of a micro-batch run backward in reverse, "
                  "after all their forwards)");
    const int64_t offset = offsets_[static_cast<size_t>(i)], length = slices_[static_cast<size_t>(i)];
    TokenSlice slice{offset, context.seq, &rec.caches, nullptr, &rec.sequence};
    ForwardContext ctx = context;
    ctx.seq = length;
    ctx.token_slice = &slice;
    // A gradient is final only once the first slice (the last to run backward) has added to it.
    Tensor dx = inner_->backward(*rec.slices.back(), doutput, ctx, grad_scale, i == 0 ? hooks : ParamHooks());
    rec.slices.pop_back();
    if (i == 0) rec.caches.clear(), rec.sequence.reset();
    return dx;
  }

  KvPool make_kv_pool(int64_t blocks, int64_t block_size) const override {
    return inner_->make_kv_pool(blocks, block_size);
  }
  Tensor decode_step(const std::vector<DecodeStep>& steps, const Tensor& input, KvPool& pool) const override {
    return inner_->decode_step(steps, input, pool);
  }
  Tensor score(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx) const override {
    return inner_->score(batch, input, ctx);
  }
  Tensor logits(const MicroBatch& batch, const ForwardContext& ctx) const override { return inner_->logits(batch, ctx); }

 private:
  void check_slice(int i) const {
    TESSERA_CHECK(i >= 0 && static_cast<size_t>(i) < slices_.size(), "token slice ", i, " of ", slices_.size());
  }
  void check_context(const ForwardContext& ctx) const {
    TESSERA_CHECK(ctx.token_slice == nullptr, "token slices of a token slice");
    TESSERA_CHECK(ctx.seq == config().seq_length, "--pipeline-token-slices: a micro-batch of ", ctx.seq,
                  " tokens per sample, sliced for --seq-length=", config().seq_length);
  }

  std::unique_ptr<LanguageModelChunk> inner_;
  std::vector<int64_t> slices_, offsets_;  // lengths, and first positions
};

}  // namespace

MicroBatch token_slice_of(const MicroBatch& batch, int64_t offset, int64_t length) {
  TESSERA_CHECK(batch.tokens.defined() && batch.tokens.shape().size() == 2, "token slice of a micro-batch without "
                "[batch, seq] tokens");
  const int64_t samples = batch.tokens.dim(0), seq = batch.tokens.dim(1);
  TESSERA_CHECK(offset >= 0 && length > 0 && offset + length <= seq, "token slice [", offset, ", ", offset + length,
                ") of a sequence of ", seq);
  TESSERA_CHECK(!batch.doc_start.defined() && !batch.padding_mask.defined(), "token slices need plain causal "
                "attention (no document or padding mask)");
  MicroBatch part;
  part.tokens = columns(batch.tokens, offset, length);
  part.labels = columns(batch.labels, offset, length);
  part.loss_mask = columns(batch.loss_mask, offset, length);
  part.token_types = columns(batch.token_types, offset, length);
  if (batch.positions.defined()) {
    part.positions = columns(batch.positions, offset, length);
  } else {
    const Device device = batch.tokens.device();
    Tensor seq_major = Tensor::empty({length, samples}, DType::I32, device);
    kernels::fill_positions(seq_major, samples, offset);
    part.positions = Tensor::empty({samples, length}, DType::I32, device);
    kernels::transpose_rows(seq_major, part.positions);
  }
  part.sample_offset = batch.sample_offset;
  // The slice's ids are the micro-batch's: checked on the host before it moved to a GPU, they need no check
  // (a copy back, a synchronisation) per slice.
  part.ids_checked_below = batch.ids_checked_below;
  return part;
}

std::unique_ptr<TokenSlicedChunk> with_token_slices(std::unique_ptr<LanguageModelChunk> chunk,
                                                    std::vector<int64_t> slices) {
  return std::make_unique<SlicedChunk>(std::move(chunk), std::move(slices));
}

}  // namespace tessera::model
