// first_shared_device over MPI: which members of a group use one GPU, from one key per rank (the real
// key, host and PCI bus, needs a GPU; here ranks pass made-up ones).
#include "comm/device_collectives.h"

#include <gtest/gtest.h>

#include "comm/mpi_process_group.h"
#include "comm/mpi_test_main.h"

namespace tessera::comm {
namespace {

TEST(FirstSharedDevice, OwnDevicesShareNothing) {
  auto g = make_mpi_world_group();
  EXPECT_EQ(first_shared_device(*g, 1000 + g->rank()), std::nullopt);
}

TEST(FirstSharedDevice, TwoRanksPerDevice) {
  auto g = make_mpi_world_group();
  auto shared = first_shared_device(*g, g->rank() / 2);
  if (g->size() < 2) {
    EXPECT_EQ(shared, std::nullopt);
  } else {
    EXPECT_EQ(shared, std::make_optional(std::make_pair(0, 1)));
  }
}

TEST(FirstSharedDevice, OnlyTheLastTwoShare) {
  auto g = make_mpi_world_group();
  if (g->size() < 3) GTEST_SKIP() << "needs three ranks";
  const int last = g->size() - 1;
  auto shared = first_shared_device(*g, g->rank() == last ? last - 1 : g->rank());
  EXPECT_EQ(shared, std::make_optional(std::make_pair(last - 1, last)));
}

}  // namespace
}  // namespace tessera::comm
