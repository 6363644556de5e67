#include "model/batch_layout.h"

#include "core/check.h"
#include "kernels/token_layout.h"

namespace tessera::model {

Tensor to_seq_major(const Tensor& t) {
  Tensor out = Tensor::empty({t.dim(1), t.dim(0)}, t.dtype());
  kernels::transpose_rows(t, out);
  return out;
}

void check_ids(const Tensor& ids, int64_t limit, const char* what, const char* range) {
  const kernels::IdOutside bad = kernels::first_id_outside(ids, 0, limit);
  TESSERA_CHECK(bad.index < 0, what, " id ", bad.id, " is outside ", range, " [0, ", limit, ")");
}

}  // namespace tessera::model
