#include "comm/collective_log.h"

#include <gtest/gtest.h>

namespace tessera::comm {
namespace {

TEST(CollectiveLog, KeepsTheLastRecordsOldestFirst) {
  CollectiveLog log(3);
  EXPECT_EQ(log.format(), "");
  uint64_t first = log.record("all_reduce", "tensor", 4096, 1);
  log.mark_done(first);
  log.record("all_gather", "tensor", 128, 2);
  EXPECT_EQ(log.format(),
            "  #1 all_reduce on group tensor, 4096 bytes, done\n"
            "  #2 all_gather on group tensor, 128 bytes, pending");

  uint64_t third = log.record("broadcast", "data", 8, 1);
  log.record("send", "pipeline", 0, 1);
  uint64_t fifth = log.record("recv", "pipeline", 16, 2);
  log.mark_done(fifth);
  log.mark_done(first);  // evicted: nothing to mark
  log.mark_done(third);
  EXPECT_EQ(log.format(),
            "  #1 broadcast on group data, 8 bytes, done\n"
            "  #1 send on group pipeline, 0 bytes, pending\n"
            "  #2 recv on group pipeline, 16 bytes, done");
  std::vector<CollectiveRecord> recent = log.recent();
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[0].id, third);
  EXPECT_EQ(recent[2].id, fifth);
}

TEST(CollectiveLog, GlobalLogSaysNoneWhenEmpty) {
  // Nothing in this single-process binary records into the global log.
  EXPECT_EQ(recent_collectives(), "  (none)");
}

}  // namespace
}  // namespace tessera::comm
