// RingProducer with several reservations open: records reach the consumer in reservation
// order, each once it and every earlier one are committed.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "ipc/shm_ring.h"

namespace dumpd::ipc {
namespace {

struct Ring {
  Ring()
      : producer(RingProducer::create(64 << 10).value()),
        consumer(RingConsumer::attach(UniqueFd(::fcntl(producer.memfd(), F_DUPFD_CLOEXEC, 0)),
                                      producer.mappedBytes(), 1 << 20)
                     .value()) {}
  RingProducer producer;
  RingConsumer consumer;
};

std::optional<RingConsumer::Record> nextReal(RingConsumer& c) {
  for (;;) {
    auto r = c.next();
    EXPECT_TRUE(r.has_value());
    if (!r.has_value() || !r.value()) return std::nullopt;
    if (r.value()->kind != RecordKind::kPad) return *r.value();
    (void)c.release(r.value()->end);
  }
}

TEST(RingReservations, LaterCommitWaitsForEarlierOne) {
  Ring r;
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  const uint64_t a = r.producer.reservedSequence();
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  const uint64_t b = r.producer.reservedSequence();
  EXPECT_EQ(b, a + 1);
  EXPECT_EQ(r.producer.openReservations(), 2u);
  r.producer.commit(b);
  EXPECT_FALSE(nextReal(r.consumer)) << "b waits for a";
  EXPECT_EQ(r.producer.lastSequence(), 0u);
  EXPECT_EQ(r.producer.control()->producer_busy.load(), 1u);
  r.producer.commit(a);
  auto first = nextReal(r.consumer);
  auto second = nextReal(r.consumer);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->sequence, a);
  EXPECT_EQ(second->sequence, b);
  EXPECT_EQ(r.producer.lastSequence(), b);
  EXPECT_EQ(r.producer.control()->producer_busy.load(), 0u) << "nothing open any more";
}

TEST(RingReservations, VoidRecordAcrossTheWrapKeepsItsSequence) {
  Ring r;
  const uint64_t big = r.producer.maxBodyBytes() / 2;
  // Move the head near the end so the second reservation wraps (pad before it).
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, big), nullptr);
  r.producer.commit();
  auto first = nextReal(r.consumer);
  ASSERT_TRUE(first);
  (void)r.consumer.release(first->end);
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  const uint64_t a = r.producer.reservedSequence();
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, big), nullptr);  // wraps
  const uint64_t b = r.producer.reservedSequence();
  r.producer.voidRecord(b, 3);
  r.producer.commit(a);
  auto ra = nextReal(r.consumer);
  auto rb = nextReal(r.consumer);
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->kind, RecordKind::kOp);
  EXPECT_EQ(rb->kind, RecordKind::kVoid);
  EXPECT_EQ(rb->sequence, b);
  uint32_t lost = 0;
  std::memcpy(&lost, rb->body, 4);
  EXPECT_EQ(lost, 3u);
}

TEST(RingReservations, AbandonRewindsOnlyTheNewestOpenOne) {
  Ring r;
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  const uint64_t a = r.producer.reservedSequence();
  const uint64_t used = r.producer.usedBytes();
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  r.producer.abandon();
  EXPECT_EQ(r.producer.usedBytes(), used);
  EXPECT_EQ(r.producer.reservedSequence(), a);
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  EXPECT_EQ(r.producer.reservedSequence(), a + 1) << "the abandoned number is reused";
  r.producer.commit(a + 1);
  r.producer.commit(a);
  EXPECT_EQ(nextReal(r.consumer)->sequence, a);
  EXPECT_EQ(nextReal(r.consumer)->sequence, a + 1);
}

TEST(RingReservations, CommitsFromAnotherThreadPublishInOrder) {
  Ring r;
  constexpr uint64_t kRecords = 20000;
  std::atomic<uint64_t> reserved{0};
  std::thread committer([&] {
    // Commits each reservation in reverse pairs: 2,1,4,3,...
    for (uint64_t s = 2; s <= kRecords; s += 2) {
      while (reserved.load() < s) std::this_thread::yield();
      r.producer.commit(s);
      r.producer.commit(s - 1);
    }
  });
  uint64_t seen = 0;
  for (uint64_t i = 1; i <= kRecords; ++i) {
    std::byte* p = nullptr;
    while ((p = r.producer.tryReserve(RecordKind::kOp, 8)) == nullptr) {
      while (auto rec = nextReal(r.consumer)) {
        EXPECT_EQ(rec->sequence, ++seen);
        uint64_t v = 0;
        std::memcpy(&v, rec->body, 8);
        EXPECT_EQ(v, rec->sequence);
        (void)r.consumer.release(rec->end);
      }
    }
    std::memcpy(p, &i, 8);
    reserved.store(i);
  }
  committer.join();
  while (auto rec = nextReal(r.consumer)) {
    EXPECT_EQ(rec->sequence, ++seen);
    (void)r.consumer.release(rec->end);
  }
  EXPECT_EQ(seen, kRecords);
}

}  // namespace
}  // namespace dumpd::ipc
