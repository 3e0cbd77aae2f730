#include "daemon/log_limiter.h"

#include <gtest/gtest.h>

namespace dumpd::daemon {
namespace {

using std::chrono::seconds;

TEST(LogLimiter, AdmitsABurstPerWindowAndCountsTheRest) {
  LogLimiter limiter(3, seconds(10));
  const auto t0 = LogLimiter::Clock::time_point{} + seconds(100);
  for (int i = 0; i < 3; ++i) {
    const auto a = limiter.admit(t0 + seconds(1));
    EXPECT_TRUE(a.log) << i;
    EXPECT_EQ(a.suppressed, 0u);
  }
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(limiter.admit(t0 + seconds(2)).log) << i;
  // The next window reports what the last one dropped, once, with its first line.
  const auto next = limiter.admit(t0 + seconds(12));
  EXPECT_TRUE(next.log);
  EXPECT_EQ(next.suppressed, 7u);
  EXPECT_EQ(limiter.admit(t0 + seconds(13)).suppressed, 0u);
}

TEST(LogLimiter, TakeSuppressedReportsAndResets) {
  LogLimiter limiter(1, seconds(60));
  const auto t0 = LogLimiter::Clock::time_point{} + seconds(100);
  EXPECT_TRUE(limiter.admit(t0).log);
  EXPECT_FALSE(limiter.admit(t0).log);
  EXPECT_FALSE(limiter.admit(t0).log);
  EXPECT_EQ(limiter.takeSuppressed(), 2u);
  EXPECT_EQ(limiter.takeSuppressed(), 0u);
}

}  // namespace
}  // namespace dumpd::daemon
