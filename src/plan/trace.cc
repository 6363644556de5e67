#include "plan/trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/check.h"
#include "plan/time_model.h"

namespace tessera::plan {

nlohmann::json chrome_trace(const Plan& plan) {
  TESSERA_CHECK(!plan.pipeline.finish.empty(), "chrome_trace: the plan has no simulated iteration");
  const Layout& l = plan.layout;
  const double iteration = plan.time.total();
  nlohmann::json events = nlohmann::json::array();
  auto span = [&](int stage, const std::string& name, const std::string& category, double start, double duration) {
    if (duration <= 0) return;
    events.push_back({{"name", name}, {"cat", category}, {"ph", "X"}, {"pid", 0}, {"tid", stage},
                      {"ts", start * 1e6}, {"dur", duration * 1e6}});
  };
  for (int r = 0; r < l.pp; ++r)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                      {"args", {{"name", str_cat("pipeline rank ", r)}}}});
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", str_cat("tessera plan: ", describe(l), " on ", plan.cluster.num_devices, " x ",
                                                plan.cluster.device.name)}}}});
  for (const TimelineEvent& e : plan.pipeline.events) span(e.stage, e.name, e.category, e.start, e.duration);
  for (int r = 0; r < l.pp; ++r) {
    const double dp = data_parallel_seconds(plan.config, l, plan.cluster.device, r);
    const double opt = optimizer_seconds(plan.config, l, plan.cluster.device, r);
    double t = plan.pipeline.finish[r];
    span(r, "data-parallel reduce", "reduction", t, dp);
    span(r, "optimizer", "optimizer", t + dp, opt);
    span(r, "idle", "idle", t + dp + opt, iteration - (t + dp + opt));
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"layout", describe(l)},
            {"device", plan.cluster.device.name},
            {"devices", plan.cluster.num_devices},
            {"iteration_seconds", iteration},
            {"note", "one track per pipeline rank; every tensor- and data-parallel rank of a stage runs the same"}}}};
}

void write_chrome_trace(const Plan& plan, const std::string& path) {
  const std::string text = chrome_trace(plan).dump();
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    TESSERA_CHECK(out, "--trace=", path, ": cannot create ", temporary);
    out << text;
    out.close();
    TESSERA_CHECK(out, "--trace=", path, ": writing ", temporary, " failed");
  }
  TESSERA_CHECK(std::rename(temporary.c_str(), path.c_str()) == 0, "--trace=", path, ": cannot rename ", temporary,
                " into place");
}

}  // namespace tessera::plan
