// The flight recorder's kept iterations (daemon/kept_iterations.h).
#include "daemon/kept_iterations.h"

#include <gtest/gtest.h>

#include <vector>

namespace dumpd::daemon {
namespace {

using Kept = KeptIterations<int>;

std::vector<uint32_t> numbers(const std::vector<Kept::Iteration>& its) {
  std::vector<uint32_t> out;
  for (const auto& i : its) out.push_back(i.number);
  return out;
}

TEST(KeptIterations, KeepsTheLastStepsIterationsTheCurrentOneIncluded) {
  Kept k(3, 1 << 20);
  EXPECT_TRUE(k.add(10, 100, 8).empty());
  EXPECT_TRUE(k.add(10, 101, 8).empty());
  EXPECT_TRUE(k.add(11, 110, 8).empty());
  EXPECT_TRUE(k.add(12, 120, 8).empty());
  // A fourth iteration discards the first, with every record of it.
  EXPECT_EQ(k.add(13, 130, 8), (std::vector<int>{100, 101}));
  EXPECT_EQ(k.iterations(), 3u);
  EXPECT_EQ(k.bytes(), 24u);
  auto all = k.takeAll();
  EXPECT_EQ(numbers(all), (std::vector<uint32_t>{11, 12, 13}));
  EXPECT_EQ(all[0].items, (std::vector<int>{110}));
  EXPECT_EQ(k.iterations(), 0u);
  EXPECT_EQ(k.bytes(), 0u);
}

TEST(KeptIterations, MaxBytesDiscardsTheOldestIterationsFirst) {
  Kept k(10, 100);
  k.add(1, 10, 40);
  k.add(2, 20, 40);
  EXPECT_EQ(k.add(3, 30, 40), (std::vector<int>{10}));
  EXPECT_EQ(k.bytes(), 80u);
  EXPECT_EQ(k.notKeptWhole(), 0u);
  auto all = k.takeAll();
  EXPECT_EQ(numbers(all), (std::vector<uint32_t>{2, 3}));
  EXPECT_TRUE(all[0].whole && all[1].whole);
}

TEST(KeptIterations, ACurrentIterationTooLargeAloneIsCountedAndItsRecordHandedBack) {
  Kept k(4, 100);
  k.add(1, 10, 30);
  EXPECT_EQ(k.add(2, 20, 60), (std::vector<int>{}));
  EXPECT_EQ(k.add(2, 21, 60), (std::vector<int>{10, 21}))
      << "the older iteration goes first, then the record that still does not fit";
  EXPECT_EQ(k.add(2, 22, 60), (std::vector<int>{22}));
  EXPECT_EQ(k.notKeptWhole(), 1u) << "one iteration, counted once";
  auto all = k.takeAll();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].whole);
  EXPECT_EQ(all[0].items, (std::vector<int>{20}));
}

TEST(KeptIterations, DiscardOldestNeverTakesTheCurrentIteration) {
  Kept k(4, 1 << 20);
  EXPECT_TRUE(k.discardOldest().empty());
  k.add(5, 50, 1);
  EXPECT_TRUE(k.discardOldest().empty());
  k.add(6, 60, 1);
  EXPECT_EQ(k.discardOldest(), (std::vector<int>{50}));
  EXPECT_EQ(k.iterations(), 1u);
}

TEST(KeptIterations, MaxRecordsCapsTheRecordsWhateverTheirBytes) {
  Kept k(100, 1 << 20, 3);
  EXPECT_TRUE(k.add(1, 10, 1).empty());
  EXPECT_TRUE(k.add(1, 11, 1).empty());
  EXPECT_TRUE(k.add(2, 20, 1).empty());
  // A fourth record discards the oldest iteration first.
  EXPECT_EQ(k.add(2, 21, 1), (std::vector<int>{10, 11}));
  EXPECT_TRUE(k.add(2, 22, 1).empty());
  // The current iteration alone holds the cap: the record is handed back, not kept whole.
  EXPECT_EQ(k.add(2, 23, 1), (std::vector<int>{23}));
  EXPECT_EQ(k.records(), 3u);
  EXPECT_EQ(k.notKeptWhole(), 1u);
}

TEST(KeptIterations, TheSharedMemoryBudgetBoundsEverySessionTogether) {
  ByteBudget budget(100);
  Kept a(10, 1 << 20, UINT64_MAX, &budget);
  Kept b(10, 1 << 20, UINT64_MAX, &budget);
  EXPECT_TRUE(a.add(1, 10, 1, 40).empty());
  EXPECT_TRUE(a.add(2, 20, 1, 40).empty());
  EXPECT_EQ(budget.used(), 80u);
  // b's first record does not fit and b has nothing of its own to discard: handed back.
  EXPECT_EQ(b.add(1, 100, 1, 40), (std::vector<int>{100}));
  EXPECT_EQ(b.refusedForMemory(), 1u);
  EXPECT_EQ(b.notKeptWhole(), 1u);
  EXPECT_EQ(budget.used(), 80u);
  // a makes room from its own oldest iteration, never from b.
  EXPECT_EQ(a.add(3, 30, 1, 40), (std::vector<int>{10}));
  EXPECT_EQ(a.memory(), 80u);
  // Issue 48: that iteration was given up for memory and counted nowhere; now it is, and
  // the next trigger learns which one it was.
  EXPECT_EQ(a.discardedForMemory(), 1u);
  EXPECT_EQ(a.takeGivenUpForMemory(), (std::vector<uint32_t>{1}));
  EXPECT_TRUE(a.takeGivenUpForMemory().empty());
  EXPECT_EQ(b.discardedForMemory(), 0u);
  EXPECT_EQ(budget.used(), 80u);
  EXPECT_TRUE(b.add(1, 101, 1, 20).empty());
  EXPECT_EQ(budget.used(), 100u);
}

TEST(KeptIterations, MemoryIsGivenBackOnEveryWayOut) {
  ByteBudget budget(1000);
  {
    Kept k(2, 1 << 20, UINT64_MAX, &budget);
    k.add(1, 10, 1, 100);
    k.add(2, 20, 1, 100);
    k.add(3, 30, 1, 100);  // discards iteration 1
    EXPECT_EQ(budget.used(), 200u);
    k.discardNewest();
    EXPECT_EQ(budget.used(), 100u);
    k.discardOldest();
    EXPECT_EQ(budget.used(), 0u);
    k.add(4, 40, 1, 100);
    k.takeAll();
    EXPECT_EQ(budget.used(), 0u);
    k.add(5, 50, 1, 100);
    EXPECT_EQ(budget.used(), 100u);
  }
  EXPECT_EQ(budget.used(), 0u);  // the destructor gives back what was still kept
}

}  // namespace
}  // namespace dumpd::daemon
