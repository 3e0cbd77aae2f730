// The recorders' memory budget and each uid's share of it (daemon/recorder_budgets.h).
#include "daemon/recorder_budgets.h"

#include <gtest/gtest.h>

namespace dumpd::daemon {
namespace {

TEST(RecorderBudgets, OneUidHoldsAtMostAQuarterAndTheOthersTheRest) {
  RecorderBudgets b(1000);
  auto flood = b.forUid(4001);
  EXPECT_EQ(flood, b.forUid(4001));  // every session of a uid shares its share
  EXPECT_TRUE(flood->tryCharge(250));
  EXPECT_FALSE(flood->tryCharge(1));
  auto other = b.forUid(4002);
  EXPECT_TRUE(other->tryCharge(250));
  EXPECT_TRUE(b.forUid(4003)->tryCharge(250));
  EXPECT_TRUE(b.forUid(4004)->tryCharge(250));
  EXPECT_FALSE(b.forUid(4005)->tryCharge(1));  // the total
  EXPECT_EQ(b.total().used(), 1000u);
}

}  // namespace
}  // namespace dumpd::daemon
