// --log-straggler (Megatron's StragglerDetector, reported at the log interval): every rank's step,
// compute and communication times over the interval, gathered on every rank, and the slowest and
// fastest --straggler-minmax-count ranks named with their compute time's ratio to the median. Under
// data or pipeline parallelism the ranks wait for one another, so every rank's step takes about as
// long as the slowest's: the rank's own compute (forward and backward) is what tells a straggler, and
// the others show its delay as communication (their wait in the gradient reduction and the pipeline's
// receives).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::comm {
class ProcessGroup;
}

namespace tessera::train {

// One rank's times over a log interval, in ms per iteration.
struct RankTimes {
  double step_ms = 0, compute_ms = 0, communication_ms = 0;
};

// Every rank's times, in world-rank order (collective; a null world is this rank alone).
std::vector<RankTimes> gather_rank_times(comm::ProcessGroup* world, const RankTimes& mine);

// The report line of iteration `iteration`: the median compute time, then the `count` slowest ranks
// (slowest first) and the `count` fastest, each with its step, compute and communication times and its
// compute time over the median ("1.00x" for all when the ranks are equal).
std::string straggler_report(const std::vector<RankTimes>& ranks, int64_t count, int64_t iteration);

// Testing hook, not a flag: TESSERA_STRAGGLER_DELAY_MS="RANK:MS" makes world rank RANK sleep MS
// milliseconds in the forward of each training iteration's first micro-batch (a slow device); a
// malformed value is an Error naming the variable.
void maybe_delay_straggler(int world_rank);

}  // namespace tessera::train
