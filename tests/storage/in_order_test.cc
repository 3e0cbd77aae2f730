#include "storage/writer/in_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace dumpd::storage {
namespace {

TEST(InOrderTest, TicketsCountFromOne) {
  InOrder<int> order;
  EXPECT_EQ(order.take(), 1u);
  EXPECT_EQ(order.take(), 2u);
  EXPECT_EQ(order.take(), 3u);
  EXPECT_EQ(order.held(), 0u);
}

TEST(InOrderTest, OutOfOrderCompletionReleasesInTicketOrder) {
  InOrder<std::string> order;
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 5; ++i) tickets.push_back(order.take());
  std::vector<std::string> out;
  auto sink = [&out](std::string& s) { out.push_back(s); };

  order.complete(tickets[2], "c", sink);
  order.complete(tickets[4], "e", sink);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(order.held(), 2u);

  order.complete(tickets[0], "a", sink);  // releases a only: b is missing
  EXPECT_EQ(out, (std::vector<std::string>{"a"}));
  EXPECT_EQ(order.held(), 2u);

  order.complete(tickets[1], "b", sink);  // releases b, c (d still missing)
  EXPECT_EQ(out, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(order.held(), 1u);

  order.complete(tickets[3], "d", sink);
  EXPECT_EQ(out, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(order.held(), 0u);
}

TEST(InOrderTest, InOrderCompletionReleasesAtOnce) {
  InOrder<int> order;
  std::vector<int> out;
  for (int i = 0; i < 10; ++i) {
    uint64_t t = order.take();
    order.complete(t, i, [&out](int& v) { out.push_back(v); });
    ASSERT_EQ(out.size(), static_cast<size_t>(i + 1));
    EXPECT_EQ(out.back(), i);
    EXPECT_EQ(order.held(), 0u);
  }
}

TEST(InOrderTest, ReversedCompletionIsHeldUntilTheFirstTicket) {
  InOrder<int> order;
  constexpr int kN = 100;
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kN; ++i) tickets.push_back(order.take());
  std::vector<int> out;
  auto sink = [&out](int& v) { out.push_back(v); };
  for (int i = kN - 1; i >= 1; --i) {
    order.complete(tickets[i], i, sink);
    EXPECT_EQ(order.held(), static_cast<size_t>(kN - i));
  }
  EXPECT_TRUE(out.empty());
  order.complete(tickets[0], 0, sink);
  std::vector<int> want(kN);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(out, want);
  EXPECT_EQ(order.held(), 0u);
}

TEST(InOrderTest, MoveOnlyItemsAreHandedOver) {
  InOrder<std::unique_ptr<int>> order;
  uint64_t a = order.take();
  uint64_t b = order.take();
  std::vector<int> out;
  auto sink = [&out](std::unique_ptr<int>& p) {
    ASSERT_NE(p, nullptr);
    out.push_back(*p);
  };
  order.complete(b, std::make_unique<int>(2), sink);
  order.complete(a, std::make_unique<int>(1), sink);
  EXPECT_EQ(out, (std::vector<int>{1, 2}));
}

// A sink that records the order and checks no other thread is inside it. Sleeping inside it
// widens the window in which another thread completes a ticket while one releases.
struct CheckedSink {
  std::atomic<int> inside{0};
  std::atomic<int> max_inside{0};
  std::atomic<uint64_t> calls{0};
  std::mutex mu;
  std::vector<uint64_t> out;  // guarded: an overlap shows in max_inside, not as a crash

  void operator()(uint64_t& v, bool pause) {
    int now = inside.fetch_add(1) + 1;
    int seen = max_inside.load();
    while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
    }
    if (pause) std::this_thread::sleep_for(std::chrono::microseconds(50));
    {
      std::lock_guard lock(mu);
      out.push_back(v);
    }
    calls.fetch_add(1);
    inside.fetch_sub(1);
  }
};

TEST(InOrderTest, SinkNeverRunsConcurrently) {
  InOrder<uint64_t> order;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 200;
  constexpr int kTotal = kThreads * kPerThread;
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kTotal; ++i) tickets.push_back(order.take());
  // Thread k completes tickets k, k + kThreads, ...: every thread keeps finding its ticket
  // next or nearly next, so releases start on all of them.
  CheckedSink sink;
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      for (int i = k; i < kTotal; i += kThreads) {
        order.complete(tickets[i], tickets[i], [&](uint64_t& v) { sink(v, (v % 16) == 0); });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sink.max_inside.load(), 1);
  EXPECT_EQ(sink.calls.load(), static_cast<uint64_t>(kTotal));
  ASSERT_EQ(sink.out.size(), static_cast<size_t>(kTotal));
  for (int i = 0; i < kTotal; ++i) ASSERT_EQ(sink.out[i], static_cast<uint64_t>(i + 1)) << i;
  EXPECT_EQ(order.held(), 0u);
}

TEST(InOrderTest, ManyThreadsStressTakeAndCompleteShuffled) {
  InOrder<uint64_t> order;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000;
  constexpr int kTotal = kThreads * kPerThread;
  // Tickets taken up front in order, then dealt out shuffled: completions arrive in any order.
  std::vector<uint64_t> tickets(kTotal);
  for (auto& t : tickets) t = order.take();
  std::mt19937 rng(12345);
  std::shuffle(tickets.begin(), tickets.end(), rng);
  CheckedSink sink;
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      for (int i = k * kPerThread; i < (k + 1) * kPerThread; ++i) {
        order.complete(tickets[i], tickets[i], [&](uint64_t& v) { sink(v, false); });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sink.max_inside.load(), 1);
  ASSERT_EQ(sink.out.size(), static_cast<size_t>(kTotal));
  for (int i = 0; i < kTotal; ++i) ASSERT_EQ(sink.out[i], static_cast<uint64_t>(i + 1)) << i;
  EXPECT_EQ(order.held(), 0u);
}

TEST(InOrderTest, ConcurrentTakersEachGetADistinctTicketAndAllRelease) {
  InOrder<uint64_t> order;
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000;
  CheckedSink sink;
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        uint64_t t = order.take();
        if (i % 7 == 0) std::this_thread::yield();
        order.complete(t, t, [&](uint64_t& v) { sink(v, false); });
      }
    });
  }
  for (auto& t : threads) t.join();
  constexpr int kTotal = kThreads * kPerThread;
  EXPECT_EQ(sink.max_inside.load(), 1);
  ASSERT_EQ(sink.out.size(), static_cast<size_t>(kTotal));
  for (int i = 0; i < kTotal; ++i) ASSERT_EQ(sink.out[i], static_cast<uint64_t>(i + 1)) << i;
  EXPECT_EQ(order.held(), 0u);
  EXPECT_EQ(order.take(), static_cast<uint64_t>(kTotal + 1));
}

TEST(InOrderTest, ItemCompletedDuringARunIsReleasedByTheReleasingThread) {
  InOrder<int> order;
  uint64_t first = order.take();
  uint64_t second = order.take();
  std::vector<int> out;
  std::atomic<bool> second_returned{false};
  std::thread other;
  // While the sink runs for ticket 1, another thread completes ticket 2: it must only deposit
  // its item and return, and the releasing thread must release it before returning itself.
  order.complete(first, 1, [&](int& v) {
    out.push_back(v);
    if (v == 1) {
      other = std::thread([&] {
        order.complete(second, 2, [&](int& w) { out.push_back(w + 100); });
        second_returned = true;
      });
      other.join();
      EXPECT_TRUE(second_returned.load());
      EXPECT_EQ(out.size(), 1u);  // not yet released: this thread is the releaser
    }
  });
  EXPECT_EQ(out, (std::vector<int>{1, 2}));
  EXPECT_EQ(order.held(), 0u);
}

}  // namespace
}  // namespace dumpd::storage
