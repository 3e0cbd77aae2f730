// A byte budget shared by many users (base/byte_budget.h).
#include "base/byte_budget.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace dumpd {
namespace {

TEST(ByteBudget, ChargesWithinTheLimitAndRefusesPastItChargingNothing) {
  ByteBudget b(100);
  EXPECT_TRUE(b.tryCharge(60));
  EXPECT_FALSE(b.tryCharge(41));
  EXPECT_EQ(b.used(), 60u);
  EXPECT_TRUE(b.tryCharge(40));
  EXPECT_FALSE(b.tryCharge(1));
  b.release(50);
  EXPECT_TRUE(b.tryCharge(50));
  EXPECT_EQ(b.used(), 100u);
}

TEST(ByteBudget, AChargeLargerThanTheLimitDoesNotWrap) {
  ByteBudget b(100);
  EXPECT_FALSE(b.tryCharge(UINT64_MAX));
  EXPECT_TRUE(b.tryCharge(100));
  EXPECT_FALSE(b.tryCharge(UINT64_MAX - 50));
}

TEST(ByteBudget, ZeroIsUnlimitedButCounted) {
  ByteBudget b(0);
  EXPECT_TRUE(b.tryCharge(uint64_t{1} << 40));
  EXPECT_EQ(b.used(), uint64_t{1} << 40);
}

TEST(ByteBudget, ConcurrentChargesNeverPassTheLimit) {
  ByteBudget b(1000);
  std::vector<std::thread> threads;
  std::atomic<uint64_t> granted{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        if (b.tryCharge(7)) granted.fetch_add(7);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(granted.load(), b.used());
  EXPECT_LE(b.used(), 1000u);
  EXPECT_GT(b.used(), 1000u - 7);
}

TEST(ByteBudget, AChargeMustFitTheParentToo) {
  auto total = std::make_shared<ByteBudget>(100);
  ByteBudget alice(60, total), bob(60, total);
  EXPECT_TRUE(alice.tryCharge(60));
  EXPECT_FALSE(alice.tryCharge(1));  // her share
  EXPECT_FALSE(bob.tryCharge(41));   // the total
  EXPECT_EQ(bob.used(), 0u);         // refused by the parent: nothing charged
  EXPECT_TRUE(bob.tryCharge(40));
  EXPECT_EQ(total->used(), 100u);
  alice.release(60);
  EXPECT_EQ(total->used(), 40u);
  EXPECT_TRUE(bob.tryCharge(20));
}

}  // namespace
}  // namespace dumpd
