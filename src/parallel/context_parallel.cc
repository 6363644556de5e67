#include "parallel/context_parallel.h"

#include "core/check.h"

namespace tessera::parallel {

void check_context_parallel_sequence(int64_t seq_length, int64_t cp) {
  TESSERA_CHECK(cp >= 1, "--context-parallel-size must be at least 1, got ", cp);
  TESSERA_CHECK(seq_length % (2 * cp) == 0, "--seq-length=", seq_length,
                ": must be divisible by 2 x --context-parallel-size=", cp,
                " (the sequence is cut into 2 x cp chunks, rank i holding chunks i and 2 x cp - 1 - i)");
}

int64_t context_parallel_global_position(int64_t local, int64_t seq_length, int cp, int rank) {
  const int64_t chunk = context_parallel_chunk_length(seq_length, cp);
  TESSERA_CHECK(local >= 0 && local < 2 * chunk, "context parallelism: local position ", local, " outside [0, ",
                2 * chunk, ")");
  return load_balanced_chunks(cp, rank)[local / chunk] * chunk + local % chunk;
}

std::vector<comm::WorkHandle> ring_shift_async(comm::ProcessGroup& group, const std::vector<Tensor>& send,
                                               const std::vector<Tensor>& recv, int tag) {
  const int n = group.size(), next = (group.rank() + 1) % n, prev = (group.rank() + n - 1) % n;
  std::vector<comm::WorkHandle> work;
  // Receives first, so that a matching send finds its buffer posted.
  for (size_t i = 0; i < recv.size(); ++i) work.push_back(group.recv_async(recv[i], prev, tag + static_cast<int>(i)));
  for (size_t i = 0; i < send.size(); ++i) work.push_back(group.send_async(send[i], next, tag + static_cast<int>(i)));
  return work;
}

void wait_all(std::vector<comm::WorkHandle>& work) {
  for (comm::WorkHandle& w : work) w->wait();
  work.clear();
}

}  // namespace tessera::parallel
