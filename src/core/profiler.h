// Per-kernel wall time, for finding where a training step goes. Off unless the environment variable
// TESSERA_PROFILE is set (to anything but "0"); then every TESSERA_PROFILE_SCOPE("name") adds its
// wall time and a call to the row `name`, and the table is printed to stderr when the process exits
// (TESSERA_PROFILE=2 also splits the GEMM row by shape):
//
//   TESSERA_PROFILE=1 tessera train ...
//
// Scopes are meant for kernel entry points, which run on the calling thread around their own OpenMP
// regions (a scope inside a parallel region would count every thread). Scopes may nest: a row's time
// includes its children's; the table marks rows that run inside others. When off, a scope costs one
// predictable branch.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::profiler {

// Whether TESSERA_PROFILE was set when the process started (read once).
bool enabled();

// TESSERA_PROFILE=2: kernels that can also split their row by shape (GEMM) do so.
bool detailed();

// Adds `seconds` and one call to the row `name` (rows are keyed by its text, which is copied);
// `nested` when it ran inside another scope, so that the table does not count it twice.
void record(const char* name, double seconds, bool nested);

// The calling thread's count of open scopes; Scope keeps it.
int& scope_depth();

// Forgets everything recorded so far, e.g. to leave a warm-up iteration out of the table.
void reset();

// The table: one row per name, by decreasing time, with calls, total seconds, ms per call and the
// share of the sum of top-level rows. Empty when nothing was recorded.
std::string report();

class Scope {
 public:
  explicit Scope(const char* name) : name_(enabled() ? name : nullptr) {
    if (name_) {
      ++scope_depth();
      start_ = std::chrono::steady_clock::now();
    }
  }
  ~Scope() {
    if (name_) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      record(name_, seconds, --scope_depth() > 0);
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera::profiler

#define TESSERA_PROFILE_CONCAT_(a, b) a##b
#define TESSERA_PROFILE_CONCAT(a, b) TESSERA_PROFILE_CONCAT_(a, b)
// Times the rest of the enclosing block under `name`.
#define TESSERA_PROFILE_SCOPE(name) \
  ::tessera::profiler::Scope TESSERA_PROFILE_CONCAT(tessera_profile_scope_, __LINE__)(name)
