#include "storage/writer/writer_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <vector>

namespace dumpd::storage {
namespace {

using namespace std::chrono_literals;

// A gate tasks wait on, so tests control when a task finishes.
struct Gate {
  std::promise<void> promise;
  std::shared_future<void> future = promise.get_future().share();
  void open() { promise.set_value(); }
};

TEST(WriterPoolTest, RunsEveryTaskAndDrainWaitsForThem) {
  WriterPool pool(2, 1000);
  std::atomic<int> done{0};
  for (int i = 0; i < 100; ++i) pool.submit(10, [&] { done.fetch_add(1); });
  pool.drain();
  EXPECT_EQ(done.load(), 100);
  EXPECT_EQ(pool.pendingTasks(), 0u);
  EXPECT_EQ(pool.pendingBytes(), 0u);
}

TEST(WriterPoolTest, OneThreadRunsTasksInSubmissionOrder) {
  WriterPool pool(1, 1000);
  std::vector<int> order;
  for (int i = 0; i < 50; ++i) pool.submit(1, [&order, i] { order.push_back(i); });
  pool.drain();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(WriterPoolTest, CapacityCountsQueuedAndRunningBytes) {
  WriterPool pool(1, 100);
  Gate gate;
  pool.submit(60, [f = gate.future] { f.wait(); });
  EXPECT_EQ(pool.pendingBytes(), 60u);
  EXPECT_EQ(pool.pendingTasks(), 1u);
  WriterPool::Task small = [] {};
  EXPECT_TRUE(pool.trySubmit(40, small));
  WriterPool::Task too_big = [] {};
  EXPECT_FALSE(pool.trySubmit(1, too_big));
  EXPECT_TRUE(static_cast<bool>(too_big));  // untouched when refused
  gate.open();
  pool.drain();
  EXPECT_EQ(pool.pendingBytes(), 0u);
}

TEST(WriterPoolTest, SubmitBlocksUntilARunningTaskFreesTheBudget) {
  // Two threads: were submit not to block, the second task could start at once.
  WriterPool pool(2, 100);
  Gate gate;
  std::atomic<bool> first_done{false};
  pool.submit(80, [&first_done, f = gate.future] {
    f.wait();
    first_done = true;
  });
  std::promise<void> submitting;
  auto second = std::async(std::launch::async, [&] {
    submitting.set_value();
    pool.submit(50, [] {});  // 80 + 50 > 100: must wait for the first task
    return first_done.load();
  });
  EXPECT_EQ(submitting.get_future().wait_for(30s), std::future_status::ready);
  // Bounded wait: a submit that does not block returns within microseconds.
  EXPECT_EQ(second.wait_for(200ms), std::future_status::timeout)
      << "submit(50) returned while 80 of 100 bytes were in use";
  gate.open();
  ASSERT_EQ(second.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(second.get()) << "submit(50) returned before the task holding the budget finished";
  pool.drain();
  EXPECT_EQ(pool.pendingBytes(), 0u);
}

TEST(WriterPoolTest, ATaskLargerThanCapacityRunsWhenTheQueueIsEmpty) {
  WriterPool pool(1, 10);
  std::atomic<bool> ran{false};
  pool.submit(1000, [&] { ran = true; });
  pool.drain();
  EXPECT_TRUE(ran.load());
  WriterPool::Task t = [] {};
  EXPECT_TRUE(pool.trySubmit(1000, t));
  pool.drain();
}

TEST(WriterPoolTest, OwnersAreServedInTurnNotInSubmissionOrder) {
  // One thread, held by a gated task of owner 1; then owner 1 queues 100 more, owner 2 one.
  WriterPool pool(1, 1 << 20);
  Gate gate;
  std::mutex mu;
  std::vector<int> order;
  pool.submit(1, 1, [f = gate.future] { f.wait(); });
  for (int i = 0; i < 100; ++i) {
    pool.submit(1, 1, [&, i] {
      std::lock_guard lock(mu);
      order.push_back(i);
    });
  }
  pool.submit(2, 1, [&] {
    std::lock_guard lock(mu);
    order.push_back(-2);
  });
  gate.open();
  pool.drain();
  ASSERT_EQ(order.size(), 101u);
  // Owner 2's task waited for at most one task of owner 1, not for its 100.
  const auto pos = std::find(order.begin(), order.end(), -2) - order.begin();
  EXPECT_LE(pos, 1) << "owner 2 was served after " << pos << " tasks of owner 1";
  // Each owner's own tasks keep their order.
  std::vector<int> mine;
  for (int v : order) {
    if (v >= 0) mine.push_back(v);
  }
  EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
}

TEST(WriterPoolTest, OneOwnerCannotTakeTheWholeBudget) {
  // Capacity 100, 30 per owner: owner 1 is held at 30; owner 2 still gets in at once.
  WriterPool pool(1, 100, nullptr, 30);
  Gate gate;
  pool.submit(1, 30, [f = gate.future] { f.wait(); });
  WriterPool::Task more = [] {};
  EXPECT_FALSE(pool.trySubmit(1, 10, more)) << "owner 1 is at its share";
  WriterPool::Task other = [] {};
  EXPECT_TRUE(pool.trySubmit(2, 30, other)) << "owner 2 must not wait behind owner 1";
  gate.open();
  pool.drain();
  EXPECT_EQ(pool.pendingBytes(), 0u);
}

TEST(WriterPoolTest, DrainWaitsForARunningTask) {
  WriterPool pool(2, 1000);
  Gate gate;
  std::atomic<bool> done{false};
  pool.submit(1, [&, f = gate.future] {
    f.wait();
    done = true;
  });
  auto drained = std::async(std::launch::async, [&] { pool.drain(); });
  EXPECT_EQ(drained.wait_for(0ms), std::future_status::timeout);
  gate.open();
  ASSERT_EQ(drained.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(done.load());
}

TEST(WriterPoolTest, DestructionRunsQueuedTasks) {
  std::atomic<int> done{0};
  {
    WriterPool pool(1, 1000);
    Gate gate;
    pool.submit(1, [f = gate.future] { f.wait(); });
    for (int i = 0; i < 10; ++i) pool.submit(1, [&] { done.fetch_add(1); });
    gate.open();
  }
  EXPECT_EQ(done.load(), 10);
}

}  // namespace
}  // namespace dumpd::storage
