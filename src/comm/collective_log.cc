#include "comm/collective_log.h"

#include "core/check.h"

namespace tessera::comm {

CollectiveLog::CollectiveLog(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {
  ring_.reserve(capacity_);
}

uint64_t CollectiveLog::record(const char* op, const std::string& group, int64_t bytes, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  CollectiveRecord r{next_id_++, op, group, bytes, seq, false};
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(r));
  } else {
    ring_[r.id % capacity_] = std::move(r);
  }
  return next_id_ - 1;
}

void CollectiveLog::mark_done(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.empty()) return;
  CollectiveRecord& r = ring_[id % capacity_];
  if (r.id == id) r.done = true;
}

std::vector<CollectiveRecord> CollectiveLog::recent() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CollectiveRecord> out;
  out.reserve(ring_.size());
  // The oldest record is the one the next record will overwrite.
  size_t start = ring_.size() < capacity_ ? 0 : next_id_ % capacity_;
  for (size_t i = 0; i < ring_.size(); ++i) out.push_back(ring_[(start + i) % ring_.size()]);
  return out;
}

std::string CollectiveLog::format() const {
  std::string s;
  for (const CollectiveRecord& r : recent()) {
    if (!s.empty()) s += "\n";
    s += str_cat("  #", r.seq, " ", r.op, " on group ", r.group, ", ", r.bytes, " bytes, ",
                 r.done ? "done" : "pending");
  }
  return s;
}

CollectiveLog& global_collective_log() {
  static CollectiveLog* log = new CollectiveLog(16);  // never destroyed: used until MPI_Abort or exit
  return *log;
}

std::string recent_collectives() {
  std::string s = global_collective_log().format();
  return s.empty() ? "  (none)" : s;
}

}  // namespace tessera::comm
