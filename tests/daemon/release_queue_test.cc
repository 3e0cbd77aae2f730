#include "daemon/release_queue.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace dumpd::daemon {
namespace {

struct Ring {
  ipc::RingProducer producer;
  ipc::RingConsumer consumer;
};

Ring makeRing() {
  auto p = ipc::RingProducer::create(ipc::kMinRingBytes).value();
  auto c = ipc::RingConsumer::attach(UniqueFd(::fcntl(p.memfd(), F_DUPFD_CLOEXEC, 0)),
                                     p.mappedBytes(), 1ull << 30);
  return Ring{std::move(p), std::move(c.value())};
}

// Commits n small records and reads them; returns their (end, sequence).
std::vector<std::pair<uint64_t, uint64_t>> commitAndRead(Ring& r, int n) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (int i = 0; i < n; ++i) {
    EXPECT_NE(r.producer.tryReserve(ipc::RecordKind::kOp, 8), nullptr);
    r.producer.commit();
    auto rec = r.consumer.next();
    out.emplace_back(rec.value()->end, rec.value()->sequence);
  }
  return out;
}

TEST(ReleaseQueue, ReleasesOnlyTheDonePrefixInOrder) {
  Ring r = makeRing();
  std::vector<uint64_t> done_calls;
  ReleaseQueue q(r.consumer, [&](uint64_t seq) { done_calls.push_back(seq); });
  auto recs = commitAndRead(r, 3);
  const uint64_t s0 = q.push(recs[0].first, recs[0].second, false);
  const uint64_t s1 = q.push(recs[1].first, recs[1].second, false);
  const uint64_t s2 = q.push(recs[2].first, recs[2].second, false);
  q.markDone(s2);
  q.markDone(s1);
  EXPECT_EQ(r.producer.control()->tail.load(), 0u) << "record 0 is not done yet";
  EXPECT_EQ(q.doneSequence(), 0u);
  EXPECT_TRUE(done_calls.empty());
  q.markDone(s0);
  EXPECT_EQ(r.producer.control()->tail.load(), recs[2].first);
  EXPECT_EQ(q.doneSequence(), 3u);
  EXPECT_EQ(done_calls, std::vector<uint64_t>{3});
}

TEST(ReleaseQueue, PadRecordsDoNotMoveTheDoneSequence) {
  Ring r = makeRing();
  ReleaseQueue q(r.consumer, nullptr);
  auto recs = commitAndRead(r, 1);
  q.push(recs[0].first, recs[0].second, true);
  EXPECT_EQ(q.doneSequence(), 1u);
  q.push(recs[0].first + 64, 0, true);  // a pad record after it
  EXPECT_EQ(q.doneSequence(), 1u);
}

TEST(ReleaseQueue, WaitIdleReturnsOnceWriterThreadsFinish) {
  Ring r = makeRing();
  ReleaseQueue q(r.consumer, nullptr);
  auto recs = commitAndRead(r, 50);
  std::vector<uint64_t> slots;
  for (auto& [end, seq] : recs) slots.push_back(q.push(end, seq, false));
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t) {
    writers.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < slots.size(); i += 2) q.markDone(slots[i]);
    });
  }
  q.waitIdle();
  EXPECT_EQ(q.doneSequence(), 50u);
  EXPECT_EQ(r.producer.control()->tail.load(), recs.back().first);
  for (auto& w : writers) w.join();
}

TEST(ReleaseQueue, AWaitingProducerIsWokenAfterRelease) {
  Ring r = makeRing();
  ReleaseQueue q(r.consumer, nullptr);
  // Fill the ring so the producer must wait.
  const uint64_t big = r.producer.maxBodyBytes();
  ASSERT_NE(r.producer.tryReserve(ipc::RecordKind::kOp, big), nullptr);
  r.producer.commit();
  auto rec = r.consumer.next();
  const uint64_t slot = q.push(rec.value()->end, rec.value()->sequence, false);
  std::thread producer([&] { EXPECT_TRUE(r.producer.waitForSpace(big, 60000)); });
  while (r.producer.control()->producer_waiting.load() == 0) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  q.markDone(slot);
  producer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(ReleaseQueue, AHeldRecordKeepsTheTailButSettlesForFlushes) {
  Ring r = makeRing();
  std::vector<uint64_t> settled_calls;
  ReleaseQueue q(r.consumer, [&](uint64_t seq) { settled_calls.push_back(seq); });
  auto recs = commitAndRead(r, 3);
  const uint64_t s0 = q.push(recs[0].first, recs[0].second, false);
  const uint64_t s1 = q.push(recs[1].first, recs[1].second, false);
  q.hold(s0);
  EXPECT_EQ(q.settledSequence(), 1u) << "a held record is settled";
  EXPECT_EQ(q.doneSequence(), 0u);
  q.markDone(s1);
  q.push(recs[2].first, recs[2].second, true);
  EXPECT_EQ(q.settledSequence(), 3u);
  EXPECT_EQ(q.doneSequence(), 0u) << "nothing after a held record is released";
  EXPECT_EQ(r.producer.control()->tail.load(), 0u);
  q.waitIdle();    // returns: nothing is in flight
  q.markDone(s0);  // discarded by the recorder
  EXPECT_EQ(q.doneSequence(), 3u);
  EXPECT_EQ(r.producer.control()->tail.load(), recs[2].first);
  EXPECT_EQ(settled_calls, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(ReleaseQueue, AHeldRecordWrittenAfterAllIsWaitedForAgain) {
  Ring r = makeRing();
  ReleaseQueue q(r.consumer, nullptr);
  auto recs = commitAndRead(r, 2);
  const uint64_t s0 = q.push(recs[0].first, recs[0].second, false);
  q.hold(s0);
  q.write(s0);  // a trigger: it goes to a writer
  const uint64_t s1 = q.push(recs[1].first, recs[1].second, true);
  (void)s1;
  EXPECT_EQ(q.settledSequence(), 2u) << "a flush answered past it stays answered";
  std::atomic<bool> idle{false};
  std::thread waiter([&] {
    q.waitIdle();
    idle = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(idle.load()) << "waitIdle waits for the written record";
  q.markDone(s0);
  waiter.join();
  EXPECT_TRUE(idle.load());
  EXPECT_EQ(q.doneSequence(), 2u);
  EXPECT_EQ(r.producer.control()->tail.load(), recs[1].first);
}

}  // namespace
}  // namespace dumpd::daemon
