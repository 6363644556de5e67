#include "core/thread_policy.h"

#include <gtest/gtest.h>

#include <tuple>

namespace tessera {
namespace {

TEST(WaitPolicy, OneThreadHasNoWorkersToSettle) {
  EXPECT_FALSE(choose_wait_policy(1, 1, 2, 100.0).has_value());
  EXPECT_FALSE(choose_wait_policy(1, 4, 2, 100.0).has_value());
}

TEST(WaitPolicy, OwnedCoresSpinForAboutTheSpinTime) {
  // 2 threads, 1 rank, 2 CPUs: spin kSpinSeconds at 100 ns a spin.
  auto c = choose_wait_policy(2, 1, 2, 100.0);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->variable, "GOMP_SPINCOUNT");
  EXPECT_EQ(std::stoll(c->value), static_cast<long long>(kSpinSeconds * 1e9 / 100.0));
  // A fast pause would make that many spins; never fewer than libgomp's own default.
  EXPECT_EQ(std::stoll(choose_wait_policy(8, 2, 16, 1.0)->value), static_cast<long long>(kSpinSeconds * 1e9));
  EXPECT_EQ(std::stoll(choose_wait_policy(2, 1, 2, 1e6)->value), 300000LL);
}

TEST(WaitPolicy, SharedCoresWaitPassively) {
  // 2 ranks of 2 threads on 2 CPUs, and 3 threads on 2 CPUs: a spinning worker would take a core
  // another thread needs.
  for (auto [threads, ranks, cpus] : {std::tuple{2, 2, 2}, std::tuple{3, 1, 2}, std::tuple{4, 8, 16}}) {
    auto c = choose_wait_policy(threads, ranks, cpus, 100.0);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->variable, "OMP_WAIT_POLICY");
    EXPECT_EQ(c->value, "PASSIVE");
  }
}

}  // namespace
}  // namespace tessera
