#include "model/ring_attention.h"

#include <initializer_list>
#include <vector>

#include "core/progress.h"
#include "core/timer.h"
#include "kernels/attention_merge.h"
#include "kernels/elementwise.h"

namespace tessera::model {
namespace {

// Tags of the ring's messages on the context-parallel group (a communicator of its own).
constexpr int kKeyValueTag = 100;       // keys, values
constexpr int kKeyValueGradTag = 102;   // their gradients

enum class BlockMask { Skipped, Causal, Full };

// Query chunk A against key chunk B (global chunk numbers): the causal mask leaves the diagonal block's
// lower triangle, every earlier chunk whole and no later one.
BlockMask block_mask(int64_t query_chunk, int64_t key_chunk) {
  if (query_chunk < key_chunk) return BlockMask::Skipped;
  return query_chunk == key_chunk ? BlockMask::Causal : BlockMask::Full;
}

kernels::AttentionShape block_shape(const RingAttentionShape& s, BlockMask mask, const Tensor& doc_start) {
  kernels::AttentionShape shape{s.chunk, s.batch, s.heads, s.kv_heads, s.head_dim};
  shape.causal = mask == BlockMask::Causal;  // a full block is bidirectional attention without padding
  shape.bidirectional_doc_start = !shape.causal && doc_start.defined();
  return shape;
}

// A block's document mask, [batch, chunk] in the key chunk's positions, from the rank's [batch, 2 chunk]
// global document starts (undefined: none). The diagonal block's is the kernel's causal doc_start; a
// full block's is each query's first visible key of the earlier chunk (chunk: none of it).
Tensor block_doc_start(const RingAttentionShape& s, const Tensor& doc_start, int a, int64_t key_chunk) {
  if (!doc_start.defined()) return Tensor();
  Tensor block = Tensor::empty({s.batch, s.chunk}, DType::I32);
  kernels::block_doc_start(doc_start.view({s.batch, 2 * s.chunk}), a * s.chunk, key_chunk * s.chunk, block);
  return block;
}

kernels::AttentionDropout block_dropout(const RingAttentionShape& s, const kernels::AttentionDropout& layer,
                                        int64_t query_chunk, int64_t key_chunk) {
  kernels::AttentionDropout d = layer;
  d.seq = s.sequence();  // the whole sequence's masks, at the chunks' global positions
  d.query_offset = query_chunk * s.chunk;
  d.key_offset = key_chunk * s.chunk;
  return d;
}

// Rows of chunk `c` (0 or 1) of a rank's [2 chunk * batch, ...] activation.
Tensor chunk_rows(const Tensor& t, const RingAttentionShape& s, int c) {
  return t.narrow(c * s.chunk * s.batch, s.chunk * s.batch);
}

void check_shapes(const RingAttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& lse,
                  const Tensor& doc_start) {
  TESSERA_CHECK(!doc_start.defined() || (doc_start.dtype() == DType::I32 && doc_start.numel() == 2 * s.chunk * s.batch),
                "ring attention: a document mask of ", doc_start.defined() ? shape_str(doc_start.shape()) : "",
                " for batch ", s.batch, " x 2 chunks of ", s.chunk);
  TESSERA_CHECK(s.chunk > 0 && s.batch > 0 && s.cp >= 1, "ring attention: chunk ", s.chunk, ", batch ", s.batch,
                ", cp ", s.cp);
  TESSERA_CHECK(q.numel() == 2 * s.chunk * s.batch * s.heads * s.head_dim &&
                    k.numel() == 2 * s.chunk * s.batch * s.kv_heads * s.head_dim &&
                    lse.numel() == 2 * s.batch * s.heads * s.chunk,
                "ring attention: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", lse ",
                shape_str(lse.shape()), " do not hold 2 chunks of ", s.chunk, " positions x batch ", s.batch);
}

// Open MPI advances a nonblocking transfer only inside an MPI call: while a step computes, the ring's
// transfers in flight are tested at the kernels' progress points (core/progress.h), so that the next
// block moves during the current block's attention rather than at the wait.
class ProgressWhileComputing {
 public:
  explicit ProgressWhileComputing(std::initializer_list<std::vector<comm::WorkHandle>*> work) : work_(work) {
    progress::add_hook(this, [this] {
      for (std::vector<comm::WorkHandle>* list : work_)
        for (comm::WorkHandle& w : *list) w->test();
    });
  }
  ~ProgressWhileComputing() { progress::remove_hook(this); }
  ProgressWhileComputing(const ProgressWhileComputing&) = delete;
  ProgressWhileComputing& operator=(const ProgressWhileComputing&) = delete;

 private:
  std::vector<std::vector<comm::WorkHandle>*> work_;
};

// Waits for `work`, adding the wait to the context's exposed-exchange seconds when it counts them.
void wait_exposed(const parallel::ContextParallelContext& cp, std::vector<comm::WorkHandle>& work) {
  if (cp.exchange_wait_seconds == nullptr || work.empty()) {
    parallel::wait_all(work);
    return;
  }
  const Timer timer;
  parallel::wait_all(work);
  *cp.exchange_wait_seconds += timer.seconds();
}

}  // namespace

void ring_step_forward(const RingAttentionShape& s, int rank, int source, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& out, const Tensor& lse, float softmax_scale,
                       const kernels::AttentionDropout& dropout, const Tensor& doc_start) {
  check_shapes(s, q, k, lse, doc_start);
  const auto queries = parallel::load_balanced_chunks(s.cp, rank), keys = parallel::load_balanced_chunks(s.cp, source);
  // Step 0 (source == rank) comes first and gives each query chunk its diagonal block.
  bool written[2] = {source != rank, source != rank};
  Tensor part_out, part_lse;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      const BlockMask mask = block_mask(queries[a], keys[b]);
      if (mask == BlockMask::Skipped) continue;
      const Tensor out_a = chunk_rows(out, s, a), lse_a = lse.narrow(a, 1);
      const Tensor doc = block_doc_start(s, doc_start, a, keys[b]);
      if (!written[a]) {
        kernels::attention_forward(chunk_rows(q, s, a), chunk_rows(k, s, b), chunk_rows(v, s, b), out_a, lse_a,
                                   doc, block_shape(s, mask, doc), softmax_scale,
                                   block_dropout(s, dropout, queries[a], keys[b]));
        written[a] = true;
        continue;
      }
      if (!part_out.defined()) {
        part_out = Tensor::empty(out_a.shape());
        part_lse = Tensor::empty(lse_a.shape());
      }
      kernels::attention_forward(chunk_rows(q, s, a), chunk_rows(k, s, b), chunk_rows(v, s, b), part_out, part_lse,
                                 doc, block_shape(s, mask, doc), softmax_scale,
                                 block_dropout(s, dropout, queries[a], keys[b]));
      kernels::attention_merge_into(out_a, lse_a, part_out, part_lse, s.chunk, s.batch, s.heads, s.head_dim);
    }
}

void ring_step_backward(const RingAttentionShape& s, int rank, int source, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, float softmax_scale,
                        const kernels::AttentionDropout& dropout, const Tensor& doc_start) {
  check_shapes(s, q, k, lse, doc_start);
  const auto queries = parallel::load_balanced_chunks(s.cp, rank), keys = parallel::load_balanced_chunks(s.cp, source);
  Tensor dq_part, dk_part, dv_part;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      const BlockMask mask = block_mask(queries[a], keys[b]);
      if (mask == BlockMask::Skipped) continue;
      const Tensor q_a = chunk_rows(q, s, a), k_b = chunk_rows(k, s, b);
      if (!dq_part.defined()) {
        dq_part = Tensor::empty(q_a.shape());
        dk_part = Tensor::empty(k_b.shape());
        dv_part = Tensor::empty(k_b.shape());
      }
      // The merged output and log-sum-exp make each block's probabilities those of the whole row.
      const Tensor doc = block_doc_start(s, doc_start, a, keys[b]);
      kernels::attention_backward(q_a, k_b, chunk_rows(v, s, b), chunk_rows(out, s, a), lse.narrow(a, 1),
                                  chunk_rows(dout, s, a), dq_part, dk_part, dv_part, doc, block_shape(s, mask, doc),
                                  softmax_scale, block_dropout(s, dropout, queries[a], keys[b]));
      kernels::add_into(chunk_rows(dq, s, a), dq_part);
      kernels::add_into(chunk_rows(dk, s, b), dk_part);
      kernels::add_into(chunk_rows(dv, s, b), dv_part);
    }
}

void ring_attention_forward(const parallel::ContextParallelContext& cp, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& out, const Tensor& lse, const RingAttentionShape& s,
                            float softmax_scale, const kernels::AttentionDropout& dropout,
                            const Tensor& doc_start) {
  TESSERA_CHECK(cp.size() == s.cp, "ring attention: a group of ", cp.size(), " ranks for cp ", s.cp);
  const int n = cp.size(), rank = cp.rank();
  Tensor cur_k = k, cur_v = v;  // the block held at this step: rank `source`'s keys and values
  for (int step = 0; step < n; ++step) {
    const int source = (rank - step + n) % n;
    std::vector<comm::WorkHandle> work;
    Tensor next_k, next_v;
    if (step + 1 < n) {  // pass the block on while attending to it
      next_k = Tensor::empty(k.shape());
      next_v = Tensor::empty(v.shape());
      work = parallel::ring_shift_async(*cp.group, {cur_k, cur_v}, {next_k, next_v}, kKeyValueTag);
    }
    {
      const ProgressWhileComputing progress({&work});
      ring_step_forward(s, rank, source, q, cur_k, cur_v, out, lse, softmax_scale, dropout, doc_start);
    }
    wait_exposed(cp, work);
    cur_k = next_k;
    cur_v = next_v;
  }
}

void ring_attention_backward(const parallel::ContextParallelContext& cp, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dout,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv, const RingAttentionShape& s,
                             float softmax_scale, const kernels::AttentionDropout& dropout,
                             const Tensor& doc_start) {
  TESSERA_CHECK(cp.size() == s.cp, "ring attention: a group of ", cp.size(), " ranks for cp ", s.cp);
  const int n = cp.size(), rank = cp.rank();
  const Tensor dq_sum = Tensor::zeros(q.shape());
  // At step s this rank holds rank (rank - s)'s keys and values. Their gradient summed over the ranks
  // they visited before arrives from the previous rank while this rank computes its own part; the sum
  // then goes on to the next rank, in flight during the next step. After the last step the previous
  // rank sends each rank its own keys' and values' gradient, summed over every rank's queries.
  Tensor cur_k = k, cur_v = v, sum_dk, sum_dv;
  std::vector<comm::WorkHandle> grad_send;
  for (int step = 0; step < n; ++step) {
    const int source = (rank - step + n) % n;
    std::vector<comm::WorkHandle> kv_work, grad_recv;
    Tensor next_k, next_v, earlier_dk, earlier_dv;
    if (step + 1 < n) {
      next_k = Tensor::empty(k.shape());
      next_v = Tensor::empty(v.shape());
      kv_work = parallel::ring_shift_async(*cp.group, {cur_k, cur_v}, {next_k, next_v}, kKeyValueTag);
    }
    if (step > 0) {
      earlier_dk = Tensor::empty(k.shape());
      earlier_dv = Tensor::empty(v.shape());
      grad_recv = parallel::ring_shift_async(*cp.group, {}, {earlier_dk, earlier_dv}, kKeyValueGradTag);
    }
    const Tensor part_dk = Tensor::zeros(k.shape()), part_dv = Tensor::zeros(v.shape());
    {
      const ProgressWhileComputing progress({&kv_work, &grad_recv, &grad_send});
      ring_step_backward(s, rank, source, q, cur_k, cur_v, out, lse, dout, dq_sum, part_dk, part_dv, softmax_scale,
                         dropout, doc_start);
    }
    wait_exposed(cp, grad_recv);
    if (step > 0) {
      kernels::add_into(part_dk, earlier_dk);
      kernels::add_into(part_dv, earlier_dv);
    }
    wait_exposed(cp, grad_send);  // the previous sum's buffers are released once it has left
    sum_dk = part_dk;
    sum_dv = part_dv;
    if (n > 1) grad_send = parallel::ring_shift_async(*cp.group, {sum_dk, sum_dv}, {}, kKeyValueGradTag);
    wait_exposed(cp, kv_work);
    cur_k = next_k;
    cur_v = next_v;
  }
  if (n > 1) {  // this rank's own keys' and values' gradient, from the previous rank's last step
    Tensor own_dk = Tensor::empty(k.shape()), own_dv = Tensor::empty(v.shape());
    std::vector<comm::WorkHandle> own = parallel::ring_shift_async(*cp.group, {}, {own_dk, own_dv}, kKeyValueGradTag);
    wait_exposed(cp, own);
    wait_exposed(cp, grad_send);
    sum_dk = own_dk;
    sum_dv = own_dv;
  }
  dq.copy_from(dq_sum);
  dk.copy_from(sum_dk);
  dv.copy_from(sum_dv);
}

}  // namespace tessera::model
