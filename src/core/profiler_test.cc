#include "core/profiler.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace tessera::profiler {
namespace {

// TESSERA_PROFILE is read once, at the first enabled() call: set it before any test runs.
const bool kSet = [] { return setenv("TESSERA_PROFILE", "1", 1) == 0; }();

// The row of `name` in the report, or "" if there is none.
std::string row_of(const std::string& report, const std::string& name) {
  size_t at = report.find("\n  " + name + " ");
  if (at == std::string::npos) return "";
  return report.substr(at + 1, report.find('\n', at + 1) - at - 1);
}

TEST(Profiler, CountsCallsPerNameAndMarksNestedRows) {
  ASSERT_TRUE(kSet);
  ASSERT_TRUE(enabled());
  reset();
  for (int i = 0; i < 3; ++i) {
    TESSERA_PROFILE_SCOPE("outer");
    { TESSERA_PROFILE_SCOPE("inner"); }
    { TESSERA_PROFILE_SCOPE("inner"); }
  }
  EXPECT_EQ(scope_depth(), 0);
  const std::string text = report();
  const std::string outer = row_of(text, "outer"), inner = row_of(text, "inner *");
  ASSERT_NE(outer, "") << text;
  ASSERT_NE(inner, "") << text;
  EXPECT_NE(outer.find(" 3 "), std::string::npos) << outer;  // 3 calls
  EXPECT_NE(inner.find(" 6 "), std::string::npos) << inner;  // 6 calls
  // Only the top-level row is in the total, so its share is 100%.
  EXPECT_NE(outer.find("100.0%"), std::string::npos) << outer;
  EXPECT_NE(text.find("total (top-level rows)"), std::string::npos) << text;
}

TEST(Profiler, ResetForgetsEverything) {
  { TESSERA_PROFILE_SCOPE("before_reset"); }
  EXPECT_NE(report().find("before_reset"), std::string::npos);
  reset();
  EXPECT_EQ(report(), "");
  record("direct", 0.5, false);
  EXPECT_NE(row_of(report(), "direct").find("0.500"), std::string::npos) << report();
}

}  // namespace
}  // namespace tessera::profiler
