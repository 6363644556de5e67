// Helpers for the trainer's tests: command lines written as one string, and the small pipeline model
// the layout-equivalence tests share.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/check.h"
#include "kernels/tensor_ops.h"

namespace tessera::train::testing {

// "--a 1 --b" -> {"--a", "1", "--b"}, as a shell would split it.
inline std::vector<std::string> split_flags(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// A small valid run of `tessera train` (2 layers, hidden 32, mock data, one iteration); tests append
// flags to it (a flag given twice takes its last value).
inline const std::string kSmallRunFlags =
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
    "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 "
    "--train-iters 1 ";

// 8 layers split over up to 4 stages x 2 chunks, at tensor-parallel size tp, pipeline size pp and v
// model chunks per stage; the padded vocabulary is 64 at every tp, so every layout trains one model.
inline std::string pipeline_model_flags(int tp, int pp, int v, int64_t global_batch, int iters,
                                        const std::string& extra) {
  return str_cat("--num-layers 8 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
                 "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 --lr 3e-3 "
                 "--lr-warmup-iters 2 --lr-decay-iters 20 --lr-decay-style cosine --log-interval 100 --eval-iters 0 "
                 "--global-batch-size ", global_batch, " --train-iters ", iters,
                 " --make-vocab-size-divisible-by ", 64 / tp, " --tensor-model-parallel-size ", tp,
                 " --pipeline-model-parallel-size ", pp,
                 v > 1 ? str_cat(" --num-virtual-stages-per-pipeline-rank ", v) : std::string(), " ", extra);
}

// A scratch directory that every rank of `world` names alike and no other run of the test does: the
// name carries rank 0's process id, so the same test run at once from another checkout or with
// another number of ranks does not write into it.
inline std::filesystem::path shared_scratch_dir(comm::ProcessGroup& world, const std::string& stem) {
  Tensor id = kernels::scalar_tensor(world.rank() == 0 ? static_cast<double>(::getpid()) : 0.0);  // exact below 2^24
  world.all_reduce(id);
  return std::filesystem::temp_directory_path() / str_cat(stem, "_", static_cast<int64_t>(kernels::scalar_value(id)));
}

}  // namespace tessera::train::testing
