// The pipeline schedules side by side in the simulator (pipeline::simulate_ops), per layer costs F = 1,
// B = 1, W = 1 (1F1B and interleaved run B and W as one backward of 2): iteration time, bubble and the
// peak activations per rank, and each schedule's timeline as JSON for scripts/plot_pipeline_schedules.py.
// The same lists `tessera train` runs (pipeline::build_schedule).
// --paper: the pipeline sizes of Qi et al.'s experiments ("Zero Bubble Pipeline Parallelism", ICLR 2024:
// p = 8, 16, 32) at m = p, 2p, 4p, each schedule's bubble rate (idle / iteration time) beside the closed
// forms of the authors' README under its stated T_F = T_B = T_W (1F1B: (p-1)/(m+p-1) = B, ZB-1p: B/3,
// ZB-V: 0), and the throughput gain over 1F1B each implies.
// Usage: bench_pipeline_schedules P M [timeline.json] | bench_pipeline_schedules --paper
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

// The iteration time of each rank's lists at unit costs per (micro-batch, chunk) pass (a ZB-V chunk half).
double unit_makespan(const ScheduleShape& shape) {
  std::vector<std::vector<Op>> ops(shape.stages);
  for (int r = 0; r < shape.stages; ++r) ops[r] = build_schedule(shape, r);
  const double unit = 1.0 / shape.chunks;
  const OpCosts costs = shape.zero_bubble == ZeroBubble::Off ? OpCosts{unit, 2 * unit, 0, 0} : OpCosts{unit, unit, unit, 0};
  return simulate_ops(shape, ops, costs).makespan;
}

void paper_settings() {
  std::printf("| p | m | 1F1B bubble rate: simulated / README B | ZB-H1: simulated / README ZB-1p B/3 | ZB-V: simulated / README 0 "
              "| gain over 1F1B, ZB-H1: simulated / README | ZB-V: simulated / README |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (int p : {8, 16, 32}) {
    for (int m : {p, 2 * p, 4 * p}) {
      ScheduleShape h1{p, m, 1}, v{p, m, 2};
      h1.zero_bubble = ZeroBubble::H1;
      v.zero_bubble = ZeroBubble::V;
      const double compute = 3.0 * m;  // per rank: m micro-batches of F, B and W at 1 each
      const double t_1f1b = unit_makespan({p, m, 1}), t_h1 = unit_makespan(h1), t_v = unit_makespan(v);
      auto rate = [&](double t) { return (t - compute) / t; };
      const double b = static_cast<double>(p - 1) / (m + p - 1);
      // Throughput is proportional to 1 - bubble rate at equal compute.
      std::printf("| %d | %d | %.3f / %.3f | %.3f / %.3f | %.3f / 0 | %+.1f%% / %+.1f%% | %+.1f%% / %+.1f%% |\n", p, m,
                  rate(t_1f1b), b, rate(t_h1), b / 3, rate(t_v), 100 * (t_1f1b / t_h1 - 1), 100 * ((1 - b / 3) / (1 - b) - 1),
                  100 * (t_1f1b / t_v - 1), 100 * (1 / (1 - b) - 1));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--paper") {
    try {
      paper_settings();
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
    return 0;
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s P M [timeline.json] | %s --paper\n", argv[0], argv[0]);
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
