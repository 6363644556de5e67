#include "core/progress.h"

#include <mutex>
#include <thread>
#include <vector>

namespace tessera::progress {

namespace detail {
std::atomic<int> g_hooks{0};
}  // namespace detail

namespace {

struct Hook {
  const void* owner;
  std::thread::id thread;
  std::function<void()> run;
};

std::mutex g_mutex;
std::vector<Hook>& hooks() {
  static std::vector<Hook> h;
  return h;
}
thread_local bool t_running = false;  // a hook that reaches a kernel must not re-enter itself

}  // namespace

void add_hook(const void* owner, std::function<void()> hook) {
  remove_hook(owner);
  std::lock_guard<std::mutex> lock(g_mutex);
  hooks().push_back({owner, std::this_thread::get_id(), std::move(hook)});
  detail::g_hooks.fetch_add(1);
}

void remove_hook(const void* owner) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto it = hooks().begin(); it != hooks().end();)
    if (it->owner == owner) {
      it = hooks().erase(it);
      detail::g_hooks.fetch_sub(1);
    } else {
      ++it;
    }
}

void detail::run_hooks() {
  if (t_running) return;
  t_running = true;
  struct Reset {
    ~Reset() { t_running = false; }
  } reset;
  // Copied out of the lock: a hook may add or remove hooks (a GradBuckets destroyed elsewhere).
  thread_local std::vector<std::function<void()>> mine;
  mine.clear();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const std::thread::id self = std::this_thread::get_id();
    for (const Hook& h : hooks())
      if (h.thread == self) mine.push_back(h.run);
  }
  for (auto& run : mine) run();
}

}  // namespace tessera::progress
