#include "model/sequence_roll.h"

#include "core/check.h"
#include "kernels/tensor_ops.h"

namespace tessera::model {

Tensor roll_left(const Tensor& t, int64_t batch, const parallel::ContextParallelContext* cp) {
  Tensor out = Tensor::zeros(t.shape(), t.dtype(), t.device());
  const int64_t n = t.numel();
  const Tensor src = t.view({n}), dst = out.view({n});
  if (cp == nullptr || cp->size() == 1) {
    if (n > batch) kernels::copy(dst.narrow(0, n - batch), src.narrow(batch, n - batch));
    return out;
  }
  const int size = cp->size(), rank = cp->rank();
  TESSERA_CHECK(batch > 0 && n % (2 * batch) == 0, "roll under context parallelism: ", n, " values are not two "
                "chunks of ", batch, " samples");
  const int64_t per_chunk = n / 2;  // values of one chunk: chunk positions x batch
  // Within each chunk: one position left.
  for (int64_t c = 0; c < 2; ++c)
    if (per_chunk > batch)
      kernels::copy(dst.narrow(c * per_chunk, per_chunk - batch), src.narrow(c * per_chunk + batch, per_chunk - batch));
  // Each chunk's first position, from every rank: [rank][its chunk 0, 1][batch].
  Tensor firsts = Tensor::empty({2 * batch}, t.dtype(), t.device());
  for (int64_t c = 0; c < 2; ++c) kernels::copy(firsts.narrow(c * batch, batch), src.narrow(c * per_chunk, batch));
  Tensor all = Tensor::empty({size * 2 * batch}, t.dtype(), t.device());
  cp->group->all_gather(firsts, all);
  const auto chunks = parallel::load_balanced_chunks(size, rank);
  for (int64_t c = 0; c < 2; ++c) {
    const int64_t next = chunks[c] + 1;  // the global chunk whose first position follows this one's last
    if (next == 2 * size) continue;      // the sequence's end: 0
    const int64_t holder = next < size ? next : 2 * size - 1 - next, slot = next < size ? 0 : 1;
    kernels::copy(dst.narrow(c * per_chunk + per_chunk - batch, batch), all.narrow((holder * 2 + slot) * batch, batch));
  }
  return out;
}

}  // namespace tessera::model
