// The CUDA embedding (kernels/cuda/embedding.cu) through the tensor entry points, on tensors on cuda:0,
// against the CPU kernel on the same random inputs: the lookup with and without position embeddings and
// with ids outside the vocabulary shard, and the backward's scatter-add over repeated ids, bit for bit
// (each element sums its rows in the CPU's order). Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/embedding.h"
#include "kernels/tensor_ops.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaEmbedding = CudaKernelTest;

TEST_F(CudaEmbedding, LookupAndScatterAddAreTheCpusBitForBit) {
  struct Case {
    int64_t rows, hidden;
    int32_t vocab;
    int64_t vocab_begin, vocab_end, positions;
  };
  // Whole vocabularies and shards of one (ids outside give zero rows), hidden sizes odd and not.
  for (const Case& c : {Case{1, 1, 1, 0, 1, 1}, Case{7, 13, 5, 0, 5, 7}, Case{64, 130, 11, 3, 8, 64},
                        Case{300, 768, 50, 10, 35, 128}, Case{33, 1031, 7, 0, 7, 40}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, hidden " << c.hidden);
    const Tensor tokens = random_ids(c.rows, c.vocab, 1), positions = random_ids(c.rows, c.positions, 2);
    const Tensor wte = random({c.vocab_end - c.vocab_begin, c.hidden}, 3), wpe = random({c.positions, c.hidden}, 4);
    const Tensor tokens_gpu = to_device(tokens), positions_gpu = to_device(positions);
    for (bool with_wpe : {true, false}) {
      Tensor out = Tensor::empty({c.rows, c.hidden}), out_gpu = to_device(out);
      kernels::embedding_forward(tokens_gpu, with_wpe ? positions_gpu : Tensor(), to_device(wte),
                                 with_wpe ? to_device(wpe) : Tensor(), out_gpu, c.vocab_begin, c.vocab_end);
      kernels::embedding_forward(tokens, with_wpe ? positions : Tensor(), wte, with_wpe ? wpe : Tensor(), out,
                                 c.vocab_begin, c.vocab_end);
      EXPECT_TRUE(same_bits(to_host(out_gpu), out)) << "forward, wpe " << with_wpe;

      const Tensor dout = random({c.rows, c.hidden}, 5);
      Tensor dwte = random({c.vocab_end - c.vocab_begin, c.hidden}, 6), dwpe = random({c.positions, c.hidden}, 7);
      Tensor dwte_gpu = to_device(dwte), dwpe_gpu = to_device(dwpe);
      kernels::embedding_backward(tokens_gpu, with_wpe ? positions_gpu : Tensor(), to_device(dout), dwte_gpu,
                                  with_wpe ? dwpe_gpu : Tensor(), c.vocab_begin, c.vocab_end);
      kernels::embedding_backward(tokens, with_wpe ? positions : Tensor(), dout, dwte, with_wpe ? dwpe : Tensor(),
                                  c.vocab_begin, c.vocab_end);
      EXPECT_TRUE(same_bits(to_host(dwte_gpu), dwte)) << "dwte, wpe " << with_wpe;
      EXPECT_TRUE(same_bits(to_host(dwpe_gpu), dwpe)) << "dwpe, wpe " << with_wpe;
    }
  }
}

}  // namespace
}  // namespace tessera::cuda
