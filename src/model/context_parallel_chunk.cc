#include "model/context_parallel_chunk.h"

#include <utility>

#include "kernels/token_layout.h"
#include "model/batch_layout.h"

namespace tessera::model {
namespace {

// The rank's two chunks of a [seq, batch] tensor, as a [batch, 2 chunk] one.
Tensor chunks_of_seq_major(const Tensor& seq_major, int cp, int rank) {
  const int64_t seq = seq_major.dim(0), samples = seq_major.dim(1);
  const int64_t chunk = parallel::context_parallel_chunk_length(seq, cp);
  const auto chunks = parallel::load_balanced_chunks(cp, rank);
  Tensor local = Tensor::empty({2 * chunk, samples}, seq_major.dtype());
  for (int c = 0; c < 2; ++c) local.narrow(c * chunk, chunk).copy_from(seq_major.narrow(chunks[c] * chunk, chunk));
  Tensor out = Tensor::empty({samples, 2 * chunk}, seq_major.dtype());
  kernels::transpose_rows(local, out);
  return out;
}

Tensor chunks_of(const Tensor& t, int cp, int rank) {
  if (!t.defined()) return t;
  TESSERA_CHECK(t.shape().size() == 2, "context parallelism: a ", shape_str(t.shape()), " batch tensor");
  return chunks_of_seq_major(to_seq_major(t), cp, rank);
}

class ContextParallelChunk final : public LanguageModelChunk {
 public:
  ContextParallelChunk(std::unique_ptr<LanguageModelChunk> inner, const parallel::ContextParallelContext& cp)
      : inner_(std::move(inner)), cp_(cp) {
    TESSERA_CHECK(inner_->causal_language_model(), "--context-parallel-size needs a causal model (GPT)");
    parallel::check_context_parallel_sequence(inner_->config().seq_length, cp_.size());
  }

  const ModelConfig& config() const override { return inner_->config(); }
  const ModelChunk& chunk() const override { return inner_->chunk(); }
  void set_recompute(const Recompute& r) override { inner_->set_recompute(r); }
  bool causal_language_model() const override { return true; }
  std::vector<std::string> auxiliary_loss_names() const override { return inner_->auxiliary_loss_names(); }
  Parameter* tied_word_embedding() const override { return inner_->tied_word_embedding(); }
  std::unique_ptr<ChunkRecord> make_record() const override { return inner_->make_record(); }

  Tensor forward(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx, ChunkRecord& record,
                 LossSums& losses, const ParamHooks& hooks) const override {
    // A later pipeline stage's input is the previous stage's output for this rank's two chunks already;
    // its batch is cut all the same, for the labels and loss mask the last stage reads.
    const MicroBatch part = context_parallel_part(batch, cp_.size(), cp_.rank());
    return inner_->forward(part, input, local_context(ctx), record, losses, hooks);
  }

  Tensor backward(ChunkRecord& record, const Tensor& doutput, const ForwardContext& ctx, float grad_scale,
                  const ParamHooks& hooks) const override {
    return inner_->backward(record, doutput, local_context(ctx), grad_scale, hooks);
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
  Tensor logits(const MicroBatch& batch, const ForwardContext& ctx) const override {
    return inner_->logits(batch, ctx);
  }

 private:
  ForwardContext local_context(const ForwardContext& ctx) const {
    TESSERA_CHECK(ctx.seq == config().seq_length && ctx.context_parallel == nullptr && ctx.token_slice == nullptr,
                  "--context-parallel-size: a micro-batch of ", ctx.seq, " tokens per sample for --seq-length=",
                  config().seq_length);
    ForwardContext local = ctx;
    local.seq = 2 * parallel::context_parallel_chunk_length(ctx.seq, cp_.size());
    local.context_parallel = &cp_;
    return local;
  }

  std::unique_ptr<LanguageModelChunk> inner_;
  const parallel::ContextParallelContext& cp_;
};

}  // namespace

MicroBatch context_parallel_part(const MicroBatch& batch, int cp, int rank) {
  TESSERA_CHECK(batch.tokens.defined() && batch.tokens.shape().size() == 2, "context parallelism: a micro-batch "
                "without [batch, seq] tokens");
  TESSERA_CHECK(!batch.padding_mask.defined(), "--context-parallel-size needs causal attention (no padding mask)");
  const int64_t samples = batch.tokens.dim(0), seq = batch.tokens.dim(1);
  parallel::check_context_parallel_sequence(seq, cp);
  MicroBatch part;
  part.tokens = chunks_of(batch.tokens, cp, rank);
  part.labels = chunks_of(batch.labels, cp, rank);
  part.loss_mask = chunks_of(batch.loss_mask, cp, rank);
  part.token_types = chunks_of(batch.token_types, cp, rank);
  part.doc_start = chunks_of(batch.doc_start, cp, rank);  // global positions: ring attention keys by them
  if (batch.positions.defined()) {
    part.positions = chunks_of(batch.positions, cp, rank);
  } else {
    Tensor positions = Tensor::empty({seq, samples}, DType::I32);
    kernels::fill_positions(positions, samples);
    part.positions = chunks_of_seq_major(positions, cp, rank);
  }
  part.sample_offset = batch.sample_offset;
  part.host_loss_mask = batch.host_loss_mask;  // the whole sequence's, as MicroBatch says
  return part;
}

std::unique_ptr<LanguageModelChunk> with_context_parallel(std::unique_ptr<LanguageModelChunk> chunk,
                                                          const parallel::ContextParallelContext& cp) {
  if (cp.size() == 1) return chunk;
  return std::make_unique<ContextParallelChunk>(std::move(chunk), cp);
}

}  // namespace tessera::model
