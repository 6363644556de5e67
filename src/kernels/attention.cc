#include "kernels/attention.h"

#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

// The shape the CPU implementation takes: `shape` with the mask's pointer, every operand's size checked.
AttentionShape checked_shape(const char* kernel, const AttentionShape& shape, const Tensor& mask,
                             std::initializer_list<const Tensor*> queries, std::initializer_list<const Tensor*> kv,
                             const Tensor& lse) {
  TESSERA_CHECK(shape.doc_start == nullptr && shape.key_valid == nullptr, kernel, ": pass the mask as a tensor");
  const int64_t tokens = shape.seq * shape.batch, kv_tokens = (shape.kv_seq > 0 ? shape.kv_seq : shape.seq) * shape.batch;
  for (const Tensor* t : queries) check_numel(kernel, "a query-shaped operand", *t, tokens * shape.heads * shape.head_dim);
  for (const Tensor* t : kv) check_numel(kernel, "a key/value operand", *t, kv_tokens * shape.kv_heads * shape.head_dim);
  check_numel(kernel, "lse", lse, shape.batch * shape.heads * shape.seq);
  AttentionShape s = shape;
  if (mask.defined()) {
    const bool doc = shape.causal || shape.bidirectional_doc_start;
    check_numel(kernel, doc ? "doc_start" : "the padding mask", mask, tokens);
    (doc ? s.doc_start : s.key_valid) = mask.i32();
  }
  return s;
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& mask, const AttentionShape& shape, float softmax_scale,
                       const AttentionDropout& dropout) {
  const Device d = kernel_device("attention_forward", {&q, &k, &v, &out, &lse, &mask}, Impl::kCpuAndCuda);
  const AttentionShape s = checked_shape("attention_forward", shape, mask, {&q, &out}, {&k, &v}, lse);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::attention_forward(q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(), s, softmax_scale, dropout);
  cpu::attention_forward(q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(), s, softmax_scale, dropout);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& mask, const AttentionShape& shape, float softmax_scale,
                        const AttentionDropout& dropout) {
  const Device d =
      kernel_device("attention_backward", {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, &mask}, Impl::kCpuAndCuda);
  const AttentionShape s =
      checked_shape("attention_backward", shape, mask, {&q, &out, &dout, &dq}, {&k, &v, &dk, &dv}, lse);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::attention_backward(q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(), dout.f32(), dq.f32(),
                                      dk.f32(), dv.f32(), s, softmax_scale, dropout, d.index);
  cpu::attention_backward(q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(), dout.f32(), dq.f32(), dk.f32(), dv.f32(), s,
                          softmax_scale, dropout);
}

void block_doc_start(const Tensor& doc_start, int64_t column, int64_t first_key, const Tensor& out) {
  const Device d = kernel_device("block_doc_start", {&doc_start, &out}, Impl::kCpuAndCuda);
  TESSERA_CHECK(doc_start.dtype() == DType::I32 && out.dtype() == DType::I32 && doc_start.shape().size() == 2 &&
                    out.shape().size() == 2 && out.dim(0) == doc_start.dim(0) && column >= 0 &&
                    column + out.dim(1) <= doc_start.dim(1),
                "block_doc_start: int32 ", shape_str(out.shape()), " block at column ", column, " of int32 ",
                shape_str(doc_start.shape()), " document starts");
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::block_doc_start(doc_start.i32(), doc_start.dim(0), doc_start.dim(1), column, out.dim(1), first_key,
                                   out.i32());
  cpu::block_doc_start(doc_start.i32(), doc_start.dim(0), doc_start.dim(1), column, out.dim(1), first_key, out.i32());
}

}  // namespace tessera::kernels
