#include "core/profiler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/launcher.h"

namespace tessera::profiler {
namespace {

struct Row {
  std::string name;
  double seconds = 0;
  int64_t calls = 0;
  bool nested = false;  // ever ran inside another scope
};

// Few distinct names (one per kernel entry point), so a vector searched linearly is enough.
struct Table {
  std::mutex mutex;
  std::vector<Row> rows;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: the exit handler below still reads it
  return *t;
}

// The MPI launcher's rank, if any, so that each rank's table says whose it is.
std::string rank_label() {
  const std::optional<std::string> rank = launcher_rank();
  return rank ? " rank " + *rank : "";
}

void print_at_exit() {
  const std::string text = report();
  if (!text.empty()) std::fprintf(stderr, "%s", text.c_str());
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_PROFILE");
    const bool set = v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
    if (set) std::atexit(print_at_exit);
    return set;
  }();
  return on;
}

bool detailed() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_PROFILE");
    return enabled() && v != nullptr && std::strcmp(v, "2") == 0;
  }();
  return on;
}

int& scope_depth() {
  thread_local int depth = 0;
  return depth;
}

void record(const char* name, double seconds, bool nested) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = std::find_if(t.rows.begin(), t.rows.end(), [&](const Row& r) { return r.name == name; });
  if (it == t.rows.end()) it = t.rows.insert(t.rows.end(), Row{name});
  it->seconds += seconds;
  it->calls += 1;
  it->nested = it->nested || nested;
}

void reset() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.rows.clear();
}

std::string report() {
  Table& t = table();
  std::vector<Row> rows;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    rows = t.rows;
  }
  if (rows.empty()) return "";
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  double top = 0, nested = 0;
  for (const Row& r : rows) (r.nested ? nested : top) += r.seconds;
  std::ostringstream out;
  char line[256];
  out << "tessera profile" << rank_label() << " (wall time per kernel; * = inside another row, not in the total)\n";
  std::snprintf(line, sizeof line, "  %-34s %9s %11s %11s %7s\n", "kernel", "calls", "total s", "ms/call", "share");
  out << line;
  for (const Row& r : rows) {
    std::snprintf(line, sizeof line, "  %-34s %9lld %11.3f %11.3f %6.1f%%\n", (r.name + (r.nested ? " *" : "")).c_str(),
                  static_cast<long long>(r.calls), r.seconds, 1e3 * r.seconds / static_cast<double>(r.calls),
                  top > 0 ? 100.0 * r.seconds / top : 0.0);
    out << line;
  }
  // With an enclosing row (the trainer's train_step) and kernels inside it, what the kernels leave
  // unexplained: glue, copies and loops outside any kernel. Exact when scopes nest one level deep.
  if (nested > 0 && top > nested) {
    std::snprintf(line, sizeof line, "  %-34s %9s %11.3f %11s %6.1f%%\n", "(top-level rows outside * rows)", "",
                  top - nested, "", 100.0 * (top - nested) / top);
    out << line;
  }
  std::snprintf(line, sizeof line, "  %-34s %9s %11.3f\n", "total (top-level rows)", "", top);
  out << line;
  return out.str();
}

}  // namespace tessera::profiler
