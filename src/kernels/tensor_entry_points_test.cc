// The tensor-level entry points that model/ calls (kernels/<name>.h): each is its CPU implementation
// (kernels/cpu/<name>.h) on the tensors' memory, bitwise, and each refuses a tensor on a device this
// build has no kernels for, naming the kernel and the device, instead of reading it as host memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/fake_device_testing.h"
#include "core/philox.h"
#include "core/testing.h"
#include "kernels/activations.h"
#include "kernels/attention.h"
#include "kernels/attention_merge.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/decode_attention.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norms.h"
#include "kernels/cpu/rotary.h"
#include "kernels/cpu/shard_layout.h"
#include "kernels/cpu/token_layout.h"
#include "kernels/cpu/vocab_parallel_loss.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/decode_attention.h"
#include "kernels/device_dispatch.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "kernels/norms.h"
#include "kernels/packed_linear.h"
#include "kernels/precision.h"
#include "kernels/rotary.h"
#include "kernels/shard_layout.h"
#include "kernels/tensor_ops.h"
#include "kernels/token_layout.h"
#include "kernels/vocab_parallel_loss.h"

namespace tessera::kernels {
namespace {

// Uniform values in [lo, hi), the same for the same seed.
Tensor random(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape);
  auto v = testing::random_vector(static_cast<size_t>(t.numel()), seed, lo, hi);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

Tensor ids(const std::vector<int32_t>& v) { return from_host(v); }

// Both tensors hold the same bytes.
::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes()) return ::testing::AssertionFailure() << a.nbytes() << " vs " << b.nbytes() << " bytes";
  if (std::memcmp(a.raw(), b.raw(), a.nbytes()) != 0) return ::testing::AssertionFailure() << "the bytes differ";
  return ::testing::AssertionSuccess();
}

TEST(TensorEntryPoints, LinearIsThePointerKernel) {
  const int64_t rows = 7, in = 12, out = 5;
  Tensor x = random({rows, in}, 1), w = random({out, in}, 2), b = random({out}, 3), dy = random({rows, out}, 4);
  for (DType t : {DType::F32, DType::BF16}) {
    Tensor y = Tensor::empty({rows, out}), y_ref = Tensor::empty({rows, out});
    linear_forward(x, w, b, y, t);
    cpu::linear_forward(x.f32(), w.f32(), b.f32(), y_ref.f32(), rows, in, out, t);
    EXPECT_TRUE(same_bits(y, y_ref));
    Tensor dx = Tensor::empty({rows, in}), dw = random({out, in}, 5), db = random({out}, 6);
    Tensor dx_ref = dx.clone(), dw_ref = dw.clone(), db_ref = db.clone();
    linear_backward(dy, x, w, dx, dw, db, t);
    cpu::linear_backward(dy.f32(), x.f32(), w.f32(), dx_ref.f32(), dw_ref.f32(), db_ref.f32(), rows, in, out, false, t);
    EXPECT_TRUE(same_bits(dx, dx_ref));
    EXPECT_TRUE(same_bits(dw, dw_ref));
    EXPECT_TRUE(same_bits(db, db_ref));
  }
  // A dy that holds 16-bit values already gives what rounding it in the kernel gives.
  Tensor dy16 = Tensor::empty({rows, out});
  round_to(DType::BF16, dy, dy16);
  Tensor dx = Tensor::empty({rows, in}), dw = Tensor::zeros({out, in});
  Tensor dx_ref = Tensor::empty({rows, in}), dw_ref = Tensor::zeros({out, in});
  linear_backward(dy16, x, w, dx, dw, Tensor(), DType::BF16, false, false, /*dy_rounded=*/true);
  linear_backward(dy, x, w, dx_ref, dw_ref, Tensor(), DType::BF16);
  EXPECT_TRUE(same_bits(dx, dx_ref));
  EXPECT_TRUE(same_bits(dw, dw_ref));
  EXPECT_THROW(linear_forward(x, w, b, Tensor::empty({rows, out + 1})), Error);
}

TEST(TensorEntryPoints, NormsAreThePointerKernels) {
  const int64_t rows = 6, cols = 10;
  Tensor x = random({rows, cols}, 1), w = random({cols}, 2), b = random({cols}, 3), dy = random({rows, cols}, 4);
  Tensor y = Tensor::empty({rows, cols}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  Tensor y_ref = y.clone(), mean_ref = mean.clone(), rstd_ref = rstd.clone();
  layernorm_forward(x, w, b, y, mean, rstd, 1e-5f, DType::BF16);
  cpu::layernorm_forward(x.f32(), w.f32(), b.f32(), y_ref.f32(), mean_ref.f32(), rstd_ref.f32(), rows, cols, 1e-5f,
                         DType::BF16);
  EXPECT_TRUE(same_bits(y, y_ref));
  EXPECT_TRUE(same_bits(mean, mean_ref));
  EXPECT_TRUE(same_bits(rstd, rstd_ref));
  Tensor dx = random({rows, cols}, 5), dw = random({cols}, 6), db = random({cols}, 7);
  Tensor dx_ref = dx.clone(), dw_ref = dw.clone(), db_ref = db.clone();
  layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
  cpu::layernorm_backward(dy.f32(), x.f32(), w.f32(), mean.f32(), rstd.f32(), dx_ref.f32(), dw_ref.f32(), db_ref.f32(),
                          rows, cols);
  EXPECT_TRUE(same_bits(dx, dx_ref));
  EXPECT_TRUE(same_bits(dw, dw_ref));
  EXPECT_TRUE(same_bits(db, db_ref));

  rmsnorm_forward(x, w, y, rstd, 1e-6f);
  cpu::rmsnorm_forward(x.f32(), w.f32(), y_ref.f32(), rstd_ref.f32(), rows, cols, 1e-6f);
  EXPECT_TRUE(same_bits(y, y_ref));
  EXPECT_TRUE(same_bits(rstd, rstd_ref));
  rmsnorm_backward(dy, x, w, rstd, dx, dw);
  cpu::rmsnorm_backward(dy.f32(), x.f32(), w.f32(), rstd.f32(), dx_ref.f32(), dw_ref.f32(), rows, cols);
  EXPECT_TRUE(same_bits(dx, dx_ref));
  EXPECT_TRUE(same_bits(dw, dw_ref));
  EXPECT_THROW(rmsnorm_forward(x, w, y, Tensor::empty({rows + 1}), 1e-6f), Error);
}

TEST(TensorEntryPoints, ActivationsAreThePointerKernels) {
  const int64_t rows = 5, width = 9;
  Tensor x = random({rows, 2 * width}, 1, -4.0f, 4.0f), dy = random({rows, 2 * width}, 2);
  Tensor y = Tensor::empty({rows, 2 * width}), y_ref = y.clone();
  gelu_forward(x, y, DType::F16);
  cpu::gelu_forward(x.f32(), y_ref.f32(), x.numel(), DType::F16);
  EXPECT_TRUE(same_bits(y, y_ref));
  Tensor dx = Tensor::empty(x.shape()), dx_ref = dx.clone();
  gelu_backward(x, dy, dx);
  cpu::gelu_backward(x.f32(), dy.f32(), dx_ref.f32(), x.numel());
  EXPECT_TRUE(same_bits(dx, dx_ref));

  Tensor s = Tensor::empty({rows, width}), s_ref = s.clone(), ds = random({rows, width}, 3);
  swiglu_forward(x, s);
  cpu::swiglu_forward(x.f32(), s_ref.f32(), rows, width);
  EXPECT_TRUE(same_bits(s, s_ref));
  swiglu_backward(x, ds, dx);
  cpu::swiglu_backward(x.f32(), ds.f32(), dx_ref.f32(), rows, width);
  EXPECT_TRUE(same_bits(dx, dx_ref));
  EXPECT_THROW(swiglu_forward(x, Tensor::empty({rows, width + 1})), Error);
}

TEST(TensorEntryPoints, RotaryIsThePointerKernel) {
  const int64_t rows = 6, heads = 3, d = 8;
  Tensor x = random({rows, heads, d}, 1), x_ref = x.clone();
  Tensor pos = ids({0, 1, 2, 5, 7, 11});
  rope_forward(x, pos, 6, 10000.0f);
  cpu::rope_forward(x_ref.f32(), pos.i32(), rows, heads, d, 6, 10000.0f);
  EXPECT_TRUE(same_bits(x, x_ref));
  rope_backward(x, pos, 6, 500.0f);
  cpu::rope_backward(x_ref.f32(), pos.i32(), rows, heads, d, 6, 500.0f);
  EXPECT_TRUE(same_bits(x, x_ref));
  EXPECT_THROW(rope_forward(x, ids({0, 1}), 6, 10000.0f), Error);
}

TEST(TensorEntryPoints, DropoutIsThePointerKernel) {
  const DropoutRegion r{4, 3, 5, 2, 10, 7};
  Tensor x = random({4 * 3, 5}, 1), y = Tensor::empty(x.shape()), y_ref = y.clone();
  dropout_forward(x, y, 0.3f, 11, 12, r);
  cpu::dropout_forward(x.f32(), y_ref.f32(), 0.3f, 11, 12, r);
  EXPECT_TRUE(same_bits(y, y_ref));
  dropout_backward(x, y, 0.3f, 11, 13, r);
  cpu::dropout_backward(x.f32(), y_ref.f32(), 0.3f, 11, 13, r);
  EXPECT_TRUE(same_bits(y, y_ref));
  EXPECT_THROW(dropout_forward(x, Tensor::empty({3}), 0.3f, 11, 12, r), Error);
}

TEST(TensorEntryPoints, AttentionIsThePointerKernel) {
  AttentionShape shape{5, 2, 4, 2, 8};
  const int64_t tokens = shape.seq * shape.batch;
  Tensor q = random({tokens, 4, 8}, 1), k = random({tokens, 2, 8}, 2), v = random({tokens, 2, 8}, 3);
  Tensor dout = random({tokens, 32}, 4), doc = ids({0, 0, 2, 2, 2, 0, 1, 1, 1, 4});
  AttentionDropout drop{0.2f, 7, 8, 1, 4, 8};
  const float scale = 0.35f;
  for (bool masked : {false, true}) {
    const Tensor mask = masked ? doc : Tensor();
    AttentionShape s = shape;
    s.doc_start = masked ? doc.i32() : nullptr;
    Tensor out = Tensor::empty({tokens, 32}), lse = Tensor::empty({2, 4, 5});
    Tensor out_ref = out.clone(), lse_ref = lse.clone();
    attention_forward(q, k, v, out, lse, mask, shape, scale, drop);
    cpu::attention_forward(q.f32(), k.f32(), v.f32(), out_ref.f32(), lse_ref.f32(), s, scale, drop);
    EXPECT_TRUE(same_bits(out, out_ref));
    EXPECT_TRUE(same_bits(lse, lse_ref));
    Tensor dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape()), dv = Tensor::empty(v.shape());
    Tensor dq_ref = dq.clone(), dk_ref = dk.clone(), dv_ref = dv.clone();
    attention_backward(q, k, v, out, lse, dout, dq, dk, dv, mask, shape, scale, drop);
    cpu::attention_backward(q.f32(), k.f32(), v.f32(), out.f32(), lse.f32(), dout.f32(), dq_ref.f32(), dk_ref.f32(),
                            dv_ref.f32(), s, scale, drop);
    EXPECT_TRUE(same_bits(dq, dq_ref));
    EXPECT_TRUE(same_bits(dk, dk_ref));
    EXPECT_TRUE(same_bits(dv, dv_ref));
  }
  Tensor out = Tensor::empty({tokens, 32}), lse = Tensor::empty({2, 4, 5});
  EXPECT_THROW(attention_forward(q, k, v, out, lse, ids({0, 0}), shape, scale, drop), Error);
  AttentionShape with_pointer = shape;
  with_pointer.doc_start = doc.i32();
  EXPECT_THROW(attention_forward(q, k, v, out, lse, Tensor(), with_pointer, scale, drop), Error);

  // Decoding 2 new positions after 3 cached ones, in a pool of 2 blocks of 3 positions.
  Tensor qd = random({2, 4, 8}, 5), kc = random({2, 3, 2, 8}, 6), vc = random({2, 3, 2, 8}, 7);
  Tensor o = Tensor::empty({2, 32}), o_ref = o.clone();
  const std::vector<int32_t> blocks = {1, 0};
  const std::vector<PagedRows> step = {{2, 3, blocks}};
  attention_decode(qd, kc, vc, o, step, scale);
  cpu::attention_decode(qd.f32(), kc.f32(), vc.f32(), o_ref.f32(), step, 3, 4, 2, 8, scale);
  EXPECT_TRUE(same_bits(o, o_ref));
  const std::vector<PagedRows> too_long = {{2, 5, blocks}};  // the blocks hold 6 positions, not 7
  EXPECT_THROW(attention_decode(qd, kc, vc, o, too_long, scale), Error);
  const std::vector<int32_t> outside = {0, 2};
  const std::vector<PagedRows> bad_block = {{2, 3, outside}};  // block 2 is not in the pool of 2
  EXPECT_THROW(attention_decode(qd, kc, vc, o, bad_block, scale), Error);
  // The step's new keys and values land at positions 3 and 4: block 0's rows 0 and 1.
  Tensor kn = random({2, 2, 8}, 8), vn = random({2, 2, 8}, 9);
  write_kv_cache(kn, vn, kc, vc, step);
  EXPECT_TRUE(same_bits(kc.narrow(0, 1).view({3, 2, 8}).narrow(0, 2).clone(), kn));
  EXPECT_TRUE(same_bits(vc.narrow(0, 1).view({3, 2, 8}).narrow(0, 2).clone(), vn));
}

TEST(TensorEntryPoints, LossKernelsAreThePointerKernels) {
  const int64_t rows = 4, vocab = 11, begin = 22;
  Tensor logits = random({rows, vocab}, 1, -3.0f, 3.0f), targets = ids({22, 30, 5, 32});
  Tensor mx = Tensor::empty({rows}), se = Tensor::empty({rows}), tg = Tensor::empty({rows});
  Tensor mx_ref = mx.clone(), se_ref = se.clone(), tg_ref = tg.clone();
  cross_entropy_shard_stats(logits, targets, mx, se, tg, begin);
  cpu::cross_entropy_shard_stats(logits.f32(), targets.i32(), mx_ref.f32(), se_ref.f32(), tg_ref.f32(), rows, vocab,
                                 begin);
  EXPECT_TRUE(same_bits(mx, mx_ref));
  EXPECT_TRUE(same_bits(se, se_ref));
  EXPECT_TRUE(same_bits(tg, tg_ref));

  Tensor global_max = random({rows}, 2, 3.0f, 4.0f), se2 = se.clone();
  rescale_sum_exp(se, mx, global_max);
  cpu::rescale_sum_exp(se2.f32(), mx.f32(), global_max.f32(), rows);
  EXPECT_TRUE(same_bits(se, se2));
  Tensor mask = random({rows}, 3, 0.0f, 1.0f), lse = Tensor::empty({rows}), lse_ref = lse.clone();
  EXPECT_EQ(masked_loss_sum(mx, se, tg, mask, lse),
            cpu::masked_loss_sum(mx.f32(), se.f32(), tg.f32(), mask.f32(), lse_ref.f32(), rows));
  EXPECT_TRUE(same_bits(lse, lse_ref));
  // Kept in a loss total: each call's sum added in double, the same bits as adding the returned sums.
  const Tensor total = loss_total(Device::cpu());
  EXPECT_EQ(loss_total_value(total), 0.0);
  masked_loss_sum_into(mx, se, tg, mask, lse, total);
  masked_loss_sum_into(mx, se, tg, random({rows}, 4, 0.0f, 1.0f), lse, total);
  const double first = masked_loss_sum(mx, se, tg, mask, lse_ref);
  const double second = masked_loss_sum(mx, se, tg, random({rows}, 4, 0.0f, 1.0f), lse_ref);
  EXPECT_EQ(loss_total_value(total), 0.0 + first + second);
  EXPECT_TRUE(same_bits(lse, lse_ref));
  try {
    masked_loss_sum_into(mx, se, tg, mask, lse, Tensor::zeros({1}, DType::F32, Device::cpu()));
    ADD_FAILURE() << "an fp32 total was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("masked_loss_sum_into: the total is fp32 [1], not a loss total"),
              std::string::npos) << e.what();
  }

  Tensor best = Tensor::empty({1, 2 * rows}), best_ref = best.clone();
  shard_argmax(logits, best, begin);
  cpu::shard_argmax(logits.f32(), best_ref.f32(), rows, vocab, begin);
  EXPECT_TRUE(same_bits(best, best_ref));
  Tensor scores = Tensor::empty({3 * rows}), scores_ref = scores.clone();
  pick_scores(best, tg, lse, scores);
  cpu::pick_scores(best.f32(), 1, tg.f32(), lse.f32(), scores_ref.f32(), rows);
  EXPECT_TRUE(same_bits(scores, scores_ref));

  Tensor dloss = random({rows}, 4), dlogits = logits.clone(), dlogits_ref = logits.clone();
  cross_entropy_backward(dlogits, targets, lse, dloss, begin, DType::BF16);
  cpu::cross_entropy_backward(dlogits_ref.f32(), targets.i32(), lse.f32(), dloss.f32(), rows, vocab, begin, DType::BF16);
  EXPECT_TRUE(same_bits(dlogits, dlogits_ref));
  EXPECT_THROW(cross_entropy_backward(dlogits, ids({1}), lse, dloss, begin), Error);
}

TEST(TensorEntryPoints, TokenLayoutsAreThePointerKernels) {
  Tensor src = ids({1, 2, 3, 4, 5, 6}).view({2, 3}), dst = Tensor::empty({3, 2}, DType::I32);
  transpose_rows(src, dst);
  EXPECT_TRUE(same_bits(dst, ids({1, 4, 2, 5, 3, 6})));
  EXPECT_THROW(transpose_rows(src, Tensor::empty({2, 3}, DType::I32)), Error);

  Tensor pos = Tensor::empty({4, 3}, DType::I32);
  fill_positions(pos, 3);
  EXPECT_TRUE(same_bits(pos, ids({0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3})));
  Tensor decode_pos = Tensor::empty({3}, DType::I32);
  fill_positions(decode_pos, 1, 7);
  EXPECT_TRUE(same_bits(decode_pos, ids({7, 8, 9})));

  const int64_t rows = 3, groups = 2, per_group = 2, d = 4;
  Tensor qkv = random({rows, groups * (per_group + 2) * d}, 1);
  Tensor q = Tensor::empty({rows, groups * per_group, d}), k = Tensor::empty({rows, groups, d});
  Tensor v = Tensor::empty({rows, groups, d}), q_ref = q.clone(), k_ref = k.clone(), v_ref = v.clone();
  split_qkv(qkv, q, k, v, per_group);
  cpu::split_qkv(qkv.f32(), q_ref.f32(), k_ref.f32(), v_ref.f32(), rows, groups, per_group, d);
  EXPECT_TRUE(same_bits(q, q_ref));
  EXPECT_TRUE(same_bits(k, k_ref));
  EXPECT_TRUE(same_bits(v, v_ref));
  Tensor back = Tensor::empty(qkv.shape());
  merge_qkv(q, k, v, back, per_group);
  EXPECT_TRUE(same_bits(back, qkv));
  EXPECT_THROW(split_qkv(qkv, q, k, v, per_group + 1), Error);

  EXPECT_EQ(first_id_outside(ids({3, 4, 9}), 0, 10).index, -1);
  const IdOutside bad = first_id_outside(ids({3, 4, 12, 11}), 0, 10);
  EXPECT_EQ(bad.index, 2);
  EXPECT_EQ(bad.id, 12);
}

TEST(TensorEntryPoints, ElementwiseAndRoundingAreThePointerKernels) {
  Tensor a = random({4, 6}, 1), b = random({4, 6}, 2), bias = random({6}, 3), a_ref = a.clone();
  add_into(a, b);
  cpu::add_into(a_ref.f32(), b.f32(), 24);
  EXPECT_TRUE(same_bits(a, a_ref));
  add_bias_rows(a, bias);
  cpu::add_bias_rows(a_ref.f32(), bias.f32(), 4, 6);
  EXPECT_TRUE(same_bits(a, a_ref));
  Tensor s = Tensor::empty({24}), s_ref = s.clone();
  scale(a, 0.3f, s);
  cpu::scale(a.f32(), 0.3f, s_ref.f32(), 24);
  EXPECT_TRUE(same_bits(s, s_ref));
  round_to(DType::F16, a, s);
  round_to(DType::F16, a.f32(), s_ref.f32(), 24);
  EXPECT_TRUE(same_bits(s, s_ref));
  EXPECT_THROW(add_into(a, Tensor::empty({23})), Error);
  EXPECT_THROW(add_bias_rows(a, Tensor::empty({5})), Error);
}

TEST(TensorEntryPoints, EmbeddingIsThePointerKernel) {
  const int64_t hidden = 6, begin = 4, end = 9;
  Tensor tokens = ids({4, 8, 2, 5, 9, 4}), pos = ids({0, 1, 2, 0, 1, 2});
  Tensor wte = random({end - begin, hidden}, 1), wpe = random({3, hidden}, 2);
  Tensor out = Tensor::empty({6, hidden}), out_ref = out.clone();
  embedding_forward(tokens, pos, wte, wpe, out, begin, end);
  cpu::embedding_forward(tokens.i32(), pos.i32(), wte.f32(), wpe.f32(), out_ref.f32(), 6, hidden, begin, end);
  EXPECT_TRUE(same_bits(out, out_ref));
  embedding_forward(tokens, Tensor(), wte, Tensor(), out, begin, end);
  cpu::embedding_forward(tokens.i32(), nullptr, wte.f32(), nullptr, out_ref.f32(), 6, hidden, begin, end);
  EXPECT_TRUE(same_bits(out, out_ref));
  Tensor dout = random({6, hidden}, 3), dwte = random(wte.shape(), 4), dwpe = random(wpe.shape(), 5);
  Tensor dwte_ref = dwte.clone(), dwpe_ref = dwpe.clone();
  embedding_backward(tokens, pos, dout, dwte, dwpe, begin, end);
  cpu::embedding_backward(tokens.i32(), pos.i32(), dout.f32(), dwte_ref.f32(), dwpe_ref.f32(), 6, hidden, begin, end);
  EXPECT_TRUE(same_bits(dwte, dwte_ref));
  EXPECT_TRUE(same_bits(dwpe, dwpe_ref));
  EXPECT_THROW(embedding_forward(tokens, pos, wte, wpe, out, begin, end + 1), Error);
}

TEST(TensorEntryPoints, ShardsArePlacedAndInitialisedByTheirPlaceInTheFullTensor) {
  // A [2, 6, 3] view (two halves of 6 rows), split in 3 along dimension 1: shard r holds rows
  // [2r, 2r + 2) of both halves.
  const ShardPlace whole{{2, 6, 3}, -1, 0, 0};
  Tensor full_init = Tensor::empty({12, 3});
  fill_normal(full_init, 0.5f, 9, 10, whole);
  PhiloxStream philox(9, 10);
  for (int64_t i = 0; i < 36; ++i) ASSERT_EQ(full_init.f32()[i], 0.5f * philox.normal(static_cast<uint64_t>(i))) << i;
  Tensor shards = Tensor::empty({3 * 12});
  for (int64_t r = 0; r < 3; ++r) {
    const ShardPlace place{{2, 6, 3}, 1, 2 * r, 2};
    Tensor shard = shards.flat_range(12 * r, 12);
    fill_normal(shard, 0.5f, 9, 10, place);
    for (int64_t i = 0; i < 12; ++i) ASSERT_EQ(shard.f32()[i], full_init.f32()[full_index(place, i)]) << r << " " << i;
  }
  EXPECT_EQ(full_index({{2, 6, 3}, 1, 2, 2}, 6), 3 * 6 + 2 * 3);  // the second half's first row of shard 1
  Tensor full = Tensor::empty({12, 3});
  place_shards(shards, 3, full, {{2, 6, 3}, 1, 0, 2});
  EXPECT_TRUE(same_bits(full, full_init));
  Tensor full_ref = Tensor::empty({12, 3});
  cpu::place_shards(shards.f32(), 3, 12, full_ref.f32(), {{2, 6, 3}, 1, 0, 2});
  EXPECT_TRUE(same_bits(full, full_ref));
  EXPECT_THROW(place_shards(shards, 5, full, {{2, 6, 3}, 1, 0, 2}), Error);  // 36 elements are not 5 shards
  EXPECT_THROW(place_shards(shards, 4, full, {{2, 6, 3}, 1, 0, 2}), Error);  // 4 shards of 2 rows are not 6
}

using testing::FakeDeviceAllocator;

// The entry points with a CUDA implementation (kernels/cuda/): in a CUDA build they take tensors on
// cuda:0 to it; in a CPU-only build they are refused like the rest.
bool has_cuda_kernel(const std::string& kernel) {
  static const std::set<std::string> with_cuda = {
      "add_into",          "add_bias_rows",      "scale",           "round_to",        "gelu_forward",
      "gelu_backward",     "tanh_forward",       "tanh_backward",   "swiglu_forward",  "swiglu_backward",
      "layernorm_forward", "layernorm_backward", "rmsnorm_forward", "rmsnorm_backward", "dropout_forward",
      "dropout_backward",  "embedding_forward",  "embedding_backward", "cross_entropy_shard_stats",
      "cross_entropy_backward", "cross_entropy_fused", "from_host",
      "rope_forward",      "rope_backward",      "rescale_sum_exp", "masked_loss_sum", "masked_loss_sum_into",
      "linear_forward",    "linear_backward",    "transpose_rows",  "fill_positions",  "split_qkv",
      "merge_qkv",         "first_id_outside",   "shard_argmax",    "pick_scores",
      "fill_normal",       "place_shards",       "residual_layernorm_forward", "residual_rmsnorm_forward",
      "attention_forward", "attention_backward", "block_doc_start", "attention_merge_into"};
  return with_cuda.count(kernel) > 0;
}

// Every entry point model/ calls refuses a tensor on a device without kernels, with the kernel's name
// and the device, and a mix of devices with both devices named. In a CUDA build on a machine without a
// GPU, a kernel with a CUDA implementation gets past the device check to its launch, which fails with
// CUDA's error naming the kernel: the dispatch took it to the CUDA code. (With a GPU the fake device
// memory below is host memory, which a kernel must not be given: those are then left out.)
TEST(TensorEntryPoints, TensorsOnAnotherDeviceAreRefused) {
  bool gpu_present = false;
  if constexpr (kWithCuda) gpu_present = tessera::cuda::device_count() > 0;
  FakeDeviceAllocator fake;
  const Device cuda{DeviceType::CUDA, 0};
  Allocator* previous = register_allocator(cuda, &fake);
  {
    auto dev = [&](const Shape& s, DType t = DType::F32) { return Tensor::zeros(s, t, cuda); };
    Tensor x = dev({4, 8}), w = dev({2, 8}), y = dev({4, 2}), row = dev({4}), col = dev({8}), idx = dev({4}, DType::I32);
    Tensor q = dev({4, 2, 4}), kv = dev({4, 1, 4}), host = Tensor::zeros({4, 8});
    const AttentionShape shape{2, 2, 2, 1, 4};
    const DropoutRegion region{4, 1, 8, 0, 4, 0};
    const std::vector<std::pair<std::string, std::function<void()>>> calls = {
        {"linear_forward", [&] { linear_forward(x, w, Tensor(), y); }},
        {"linear_backward", [&] { linear_backward(y, x, w, x, w, Tensor()); }},
        {"pack_linear_weight", [&] { pack_linear_weight(w); }},
        {"packed_linear_forward", [&] { packed_linear_forward(x, dev({1, 8, 32}), Tensor(), y); }},
        {"layernorm_forward", [&] { layernorm_forward(x, col, col, x, row, row, 1e-5f); }},
        {"layernorm_backward", [&] { layernorm_backward(x, x, col, row, row, x, col, col); }},
        {"rmsnorm_forward", [&] { rmsnorm_forward(x, col, x, row, 1e-5f); }},
        {"residual_layernorm_forward", [&] { residual_layernorm_forward(x, x, col, col, x, row, row, 1e-5f); }},
        {"residual_rmsnorm_forward", [&] { residual_rmsnorm_forward(x, x, col, x, row, 1e-5f); }},
        {"rmsnorm_backward", [&] { rmsnorm_backward(x, x, col, row, x, col); }},
        {"gelu_forward", [&] { gelu_forward(x, x); }},
        {"gelu_backward", [&] { gelu_backward(x, x, x); }},
        {"tanh_forward", [&] { tanh_forward(x, x); }},
        {"tanh_backward", [&] { tanh_backward(x, x, x); }},
        {"swiglu_forward", [&] { swiglu_forward(x, dev({4, 4})); }},
        {"swiglu_backward", [&] { swiglu_backward(x, dev({4, 4}), x); }},
        {"rope_forward", [&] { rope_forward(q, idx, 4, 10000.0f); }},
        {"rope_backward", [&] { rope_backward(q, idx, 4, 10000.0f); }},
        {"dropout_forward", [&] { dropout_forward(x, x, 0.1f, 1, 2, region); }},
        {"dropout_backward", [&] { dropout_backward(x, x, 0.1f, 1, 2, region); }},
        {"attention_forward", [&] { attention_forward(q, kv, kv, q, dev({2, 2, 2}), Tensor(), shape, 1.0f, {}); }},
        {"attention_backward",
         [&] { attention_backward(q, kv, kv, q, dev({2, 2, 2}), q, q, kv, kv, Tensor(), shape, 1.0f, {}); }},
        {"block_doc_start", [&] { block_doc_start(dev({2, 2}, DType::I32), 0, 0, dev({2, 2}, DType::I32)); }},
        {"attention_merge_into", [&] { attention_merge_into(q, dev({2, 2, 2}), q, dev({2, 2, 2}), 2, 2, 2, 4); }},
        {"attention_decode", [&] { attention_decode(q, kv, kv, q, {}, 1.0f); }},
        {"write_kv_cache", [&] { write_kv_cache(q, q, kv, kv, {}); }},
        {"cross_entropy_shard_stats", [&] { cross_entropy_shard_stats(x, idx, row, row, row, 0); }},
        {"cross_entropy_backward", [&] { cross_entropy_backward(x, idx, row, row, 0); }},
        {"cross_entropy_fused", [&] { cross_entropy_fused(x, idx, row, row, row, row, row); }},
        {"rescale_sum_exp", [&] { rescale_sum_exp(row, row, row); }},
        {"masked_loss_sum", [&] { masked_loss_sum(row, row, row, row, row); }},
        {"masked_loss_sum_into", [&] { masked_loss_sum_into(row, row, row, row, row, dev({1}, DType::I64)); }},
        {"shard_argmax", [&] { shard_argmax(x, col, 0); }},
        {"pick_scores", [&] { pick_scores(dev({1, 8}), row, row, dev({12})); }},
        {"transpose_rows", [&] { transpose_rows(x, dev({8, 4})); }},
        {"fill_positions", [&] { fill_positions(idx, 1); }},
        {"split_qkv", [&] { split_qkv(dev({4, 12}), dev({4, 1, 4}), kv, kv, 1); }},
        {"merge_qkv", [&] { merge_qkv(dev({4, 1, 4}), kv, kv, dev({4, 12}), 1); }},
        {"first_id_outside", [&] { first_id_outside(idx, 0, 1); }},
        {"add_into", [&] { add_into(x, x); }},
        {"add_bias_rows", [&] { add_bias_rows(x, col); }},
        {"scale", [&] { scale(x, 2.0f, x); }},
        {"round_to", [&] { round_to(DType::BF16, x, x); }},
        {"embedding_forward", [&] { embedding_forward(idx, idx, dev({3, 8}), Tensor(), x, 0, 3); }},
        {"embedding_backward", [&] { embedding_backward(idx, idx, x, dev({3, 8}), Tensor(), 0, 3); }},
        {"fill_normal", [&] { fill_normal(x, 1.0f, 1, 2, {}); }},
        {"place_shards", [&] { place_shards(x, 1, dev({4, 8}), {}); }},
        {"from_host", [&] { from_host({1, 2}, cuda); }},
    };
    int cuda_kernels = 0;
    for (const auto& [kernel, call] : calls) {
      const bool to_cuda = kWithCuda && has_cuda_kernel(kernel);
      cuda_kernels += has_cuda_kernel(kernel);
      if (to_cuda && gpu_present) continue;
      try {
        call();
        ADD_FAILURE() << kernel << " read a tensor on cuda:0";
      } catch (const Error& e) {
        const std::string expected = to_cuda ? kernel + " failed: cuda" : kernel + " on cuda:0 is not available in this build";
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      }
    }
    EXPECT_EQ(cuda_kernels, 44);  // each name of has_cuda_kernel is a call above
    try {
      add_into(host, x);
      ADD_FAILURE() << "add_into mixed devices";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("add_into: tensors on cpu and cuda:0"), std::string::npos) << e.what();
    }
  }
  register_allocator(cuda, previous);
}

}  // namespace
}  // namespace tessera::kernels
