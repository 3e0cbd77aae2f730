// The loss_spike trigger (daemon/loss_spike.h).
#include "daemon/loss_spike.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace dumpd::daemon {
namespace {

TEST(LossSpike, NothingTriggersUntilTheWindowIsFull) {
  LossSpikeDetector d(4, 3.0);
  EXPECT_FALSE(d.report(1.0));
  EXPECT_FALSE(d.report(1.0));
  EXPECT_FALSE(d.report(100.0)) << "three losses are not a window of four";
  EXPECT_FALSE(d.report(1.0));
  // Window {1, 1, 100, 1}: median 1, limit 3.
  EXPECT_FALSE(d.report(3.0));
  auto r = d.report(3.5);  // window {1, 100, 1, 3}: median 2, limit 6
  EXPECT_FALSE(r);
  r = d.report(6.5);  // window {100, 1, 3, 3.5}: median 3.25, limit 9.75
  EXPECT_FALSE(r);
  r = d.report(9.8);  // window {1, 3, 3.5, 6.5}: median 3.25, limit 9.75
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, "loss 9.8 > 3 x median 3.25 of the last 4");
}

TEST(LossSpike, NonFiniteLossesTriggerAtOnceAndStayOutOfTheWindow) {
  LossSpikeDetector d(3, 2.0);
  auto r = d.report(std::numeric_limits<double>::quiet_NaN());
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, "loss nan");
  r = d.report(-std::numeric_limits<double>::infinity());
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, "loss -inf");
  EXPECT_TRUE(d.recent().empty());
  EXPECT_FALSE(d.report(2.0));
  EXPECT_EQ(d.recent(), (std::vector<double>{2.0}));
}

TEST(LossSpike, ANegativeMedianStillLooksForAnUpwardSpike) {
  LossSpikeDetector d(3, 2.0);
  for (double l : {-4.0, -4.0, -4.0}) EXPECT_FALSE(d.report(l));
  // Median -4: limit -4 + 1 x 4 = 0. 2 x (-4) = -8 would flag every normal step.
  EXPECT_FALSE(d.report(-3.0));
  EXPECT_FALSE(d.report(0.0));
  auto r = d.report(0.5);  // window {-4, -3, 0}: median -3, limit 0
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, "loss 0.5 > 2 x median -3 of the last 3");
}

TEST(LossSpike, TheWindowKeepsTheNewestLosses) {
  LossSpikeDetector d(2, 10.0);
  for (double l : {1.0, 2.0, 3.0}) d.report(l);
  EXPECT_EQ(d.recent(), (std::vector<double>{2.0, 3.0}));
}

}  // namespace
}  // namespace dumpd::daemon
