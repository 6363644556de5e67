// The pipeline schedules side by side in the simulator (pipeline::simulate_ops), per layer costs F = 1,
// B = 1, W = 1 (1F1B and interleaved run B and W as one backward of 2): iteration time, bubble and the
// peak activations per rank, and each schedule's timeline as JSON for scripts/plot_pipeline_schedules.py.
// The same lists `tessera train` runs (pipeline::build_schedule).
// Usage: bench_pipeline_schedules P M [timeline.json]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "pipeline/schedules.h"

using namespace tessera;
using namespace tessera::pipeline;

namespace {

struct Schedule {
  const char* name;
  ScheduleShape shape;
  OpCosts costs;  // per (micro-batch, chunk): a chunk of v holds 1/v of the stage's layers
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s P M [timeline.json]\n", argv[0]);
    return 2;
  }
  const int p = std::atoi(argv[1]), m = std::atoi(argv[2]);
  try {
    std::vector<Schedule> schedules{{"1F1B", {p, m, 1}, {1, 2, 0, 0}}};
    if (p > 1 && m % p == 0) schedules.push_back({"interleaved 1F1B, v = 2", {p, m, 2}, {0.5, 1, 0, 0}});
    ScheduleShape h1{p, m, 1}, v{p, m, 2};
    h1.zero_bubble = ZeroBubble::H1;
    v.zero_bubble = ZeroBubble::V;
    schedules.push_back({"ZB-H1", h1, {1, 1, 1, 0}});
    if (p > 1) schedules.push_back({"ZB-V", v, {0.5, 0.5, 0.5, 0}});
    std::printf("| schedule | p | m | iteration (units of F) | bubble | peak activations per rank (micro-batches) |\n");
    std::printf("| --- | --- | --- | --- | --- | --- |\n");
    std::string json = "[";
    for (const Schedule& s : schedules) {
      std::vector<std::vector<Op>> ops(p);
      for (int r = 0; r < p; ++r) ops[r] = build_schedule(s.shape, r);
      const SimulatedRun run = simulate_ops(s.shape, ops, s.costs);
      const double compute = 3.0 * m;
      std::string peaks;
      for (int r = 0; r < p; ++r)
        peaks += str_cat(r ? " " : "", peak_in_flight_bytes(ops[r], [&](int) { return 1.0 / s.shape.chunks; }));
      std::printf("| %s | %d | %d | %.1f | %.3f | %s |\n", s.name, p, m, run.makespan, (run.makespan - compute) / compute,
                  peaks.c_str());
      json += str_cat(json.size() > 1 ? "," : "", "{\"schedule\":\"", s.name, "\",\"stages\":", p, ",\"events\":[");
      bool first = true;
      for (int r = 0; r < p; ++r)
        for (size_t i = 0; i < ops[r].size(); ++i) {
          const Op& op = ops[r][i];
          if (!is_compute(op)) continue;
          const double duration = op.kind == OpKind::Forward    ? s.costs.forward_seconds
                                  : op.kind == OpKind::Backward ? s.costs.backward_seconds
                                                                : s.costs.weight_seconds;
          json += str_cat(first ? "" : ",", "[", r, ",\"", to_string(op).substr(0, 1), "\",", op.micro_batch, ",",
                          op.chunk, ",", run.start[r][i], ",", duration, "]");
          first = false;
        }
      json += "]}";
    }
    json += "]\n";
    if (argc > 3) std::ofstream(argv[3]) << json;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
