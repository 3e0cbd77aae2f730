// The recorders' memory budget and each uid's share of it (daemon/recorder_budgets.h).
#include "daemon/recorder_budgets.h"

#include <gtest/gtest.h>

namespace dumpd::daemon {
namespace {

TEST(RecorderBudgets, OneUidHoldsAtMostAQuarter) {
  RecorderBudgets b(1600);
  auto flood = b.forUid(4001);
  EXPECT_EQ(flood, b.forUid(4001));  // every session of a uid shares its share
  EXPECT_TRUE(flood->tryCharge(400));
  EXPECT_FALSE(flood->tryCharge(1));
  flood->release(400);
  EXPECT_EQ(b.total().used(), 0u);
}

TEST(RecorderBudgets, FloodingUidsLeaveAQuarterForUidsThatKeepLittle) {
  // Issue 48: four uids flooding their recorders took all of recorder_memory_bytes, and a
  // fifth, benign uid lost iterations. Uids past their floor (a sixteenth) must leave a
  // quarter free: the floods hold three quarters together.
  RecorderBudgets b(1600);
  uint64_t flooded = 0;
  for (uid_t uid = 4001; uid <= 4004; ++uid) {
    auto budget = b.forUid(uid);
    while (budget->tryCharge(10)) flooded += 10;
  }
  EXPECT_LE(flooded, 1200u + 100u);  // three quarters, and the last one's floor
  EXPECT_GE(flooded, 1200u);
  // Three uids that keep little each still get their floor (100 bytes), a fourth's is short.
  for (uid_t uid = 5001; uid <= 5003; ++uid) EXPECT_TRUE(b.forUid(uid)->tryCharge(100)) << uid;
  EXPECT_LE(b.total().used(), 1600u);
  // A flooding uid gets none of what is left, even under its own quarter.
  EXPECT_FALSE(b.forUid(4004)->tryCharge(10));
}

TEST(ByteBudget, PastItsFloorAChildLeavesTheParentsReserve) {
  auto parent = std::make_shared<ByteBudget>(100);
  ByteBudget child(80, parent, /*floor=*/20, /*parent_reserve=*/50);
  EXPECT_TRUE(child.tryCharge(20));  // within the floor: only the parent's limit
  EXPECT_TRUE(child.tryCharge(30));  // 50 used: 50 left
  EXPECT_FALSE(child.tryCharge(1));  // would leave 49
  EXPECT_EQ(parent->used(), 50u);
  EXPECT_EQ(child.used(), 50u);
  ByteBudget other(80, parent, 20, 50);
  EXPECT_TRUE(other.tryCharge(20));  // its floor comes out of the reserve
  EXPECT_FALSE(other.tryCharge(1));
  EXPECT_EQ(parent->used(), 70u);
}

}  // namespace
}  // namespace dumpd::daemon
