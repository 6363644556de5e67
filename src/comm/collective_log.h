// The last collectives this process started, kept so that a hung or failed job can say where each
// rank was: comparing the lists of two ranks shows which collective one of them never reached.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tessera::comm {

struct CollectiveRecord {
  uint64_t id = 0;         // position in the log, over all groups
  const char* op = "";     // "all_reduce", "send", ... (a string literal)
  std::string group;       // the group's name
  int64_t bytes = 0;       // payload of this rank
  uint64_t seq = 0;        // sequence number within its group, from 1
  bool done = false;       // wait() returned
};

// A ring buffer of the last `capacity` records. Thread-safe: a watchdog may read it while the
// training thread appends.
class CollectiveLog {
 public:
  explicit CollectiveLog(size_t capacity = 16);

  // Returns the record's id, for mark_done.
  uint64_t record(const char* op, const std::string& group, int64_t bytes, uint64_t seq);
  // A no-op when the record has already left the ring.
  void mark_done(uint64_t id);

  std::vector<CollectiveRecord> recent() const;  // oldest first
  // One line per record, oldest first: "  #3 all_reduce on group tensor, 4096 bytes, done".
  std::string format() const;

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  uint64_t next_id_ = 0;
  std::vector<CollectiveRecord> ring_;  // record id lives at ring_[id % capacity_]
};

// The log the MPI process groups write to (all groups of this process).
CollectiveLog& global_collective_log();
// global_collective_log().format(), or "  (none)" when nothing was recorded.
std::string recent_collectives();

}  // namespace tessera::comm
