#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ipc/shm_ring.h"

namespace dumpd::ipc {
namespace {

UniqueFd dupFd(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

struct Pair {
  RingProducer producer;
  RingConsumer consumer;
};

Pair makePair(uint64_t capacity) {
  auto p = RingProducer::create(capacity);
  EXPECT_TRUE(p.has_value());
  auto c = RingConsumer::attach(dupFd(p->memfd()), p->mappedBytes(), 1ull << 30);
  EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().message);
  return Pair{std::move(p.value()), std::move(c.value())};
}

TEST(RingFormat, LayoutIsPinned) {
  // Any change here is a wire-protocol change: bump kRingVersion.
  EXPECT_EQ(sizeof(RecordHeader), 32u);
  EXPECT_EQ(sizeof(OpHeader), 32u);
  EXPECT_EQ(sizeof(TensorDesc), 32u);
  EXPECT_EQ(offsetof(RingControl, capacity), 16u);
  EXPECT_EQ(offsetof(RingControl, head), 64u);
  EXPECT_EQ(offsetof(RingControl, tail), 128u);
  EXPECT_EQ(offsetof(RingControl, consumer_waiting), 192u);
  EXPECT_EQ(offsetof(RingControl, data_wake), 196u);
  EXPECT_EQ(offsetof(RingControl, producer_waiting), 256u);
  EXPECT_EQ(offsetof(RingControl, space_wake), 260u);
  EXPECT_EQ(offsetof(RingControl, dropped_records), 320u);
  EXPECT_EQ(offsetof(RingControl, dropped_tensors), 328u);
  EXPECT_EQ(offsetof(RingControl, closing), 384u);
  EXPECT_EQ(offsetof(RingControl, producer_busy), 448u);
  EXPECT_EQ(offsetof(RingControl, fetch_generation), 512u);
  EXPECT_EQ(offsetof(RingControl, fetch_through_iteration), 516u);
  EXPECT_EQ(offsetof(RingControl, fetch_from_sequence), 520u);
  EXPECT_EQ(kRingVersion, 7u);
  EXPECT_EQ(static_cast<int>(PayloadKind::kDeferred), 3);
  EXPECT_EQ(sizeof(DeferredPayload), 128u);
  EXPECT_EQ(offsetof(DeferredPayload, state), 96u);
  EXPECT_EQ(kDeferredHeaderBytes, 128u);
  EXPECT_EQ(sizeof(StatsPayload), 96u);
  EXPECT_EQ(offsetof(StatsPayload, max), 56u);
  EXPECT_EQ(offsetof(StatsPayload, sum_squares), 80u);
  EXPECT_EQ(static_cast<int>(PayloadKind::kStatistics), 1);
  EXPECT_EQ(kPayloadKindShift, 4);
  EXPECT_EQ(static_cast<int>(PayloadKind::kSame), 2);
  EXPECT_EQ(kMemoBit, 0x02);
  EXPECT_EQ(sizeof(SamePayload), 16u);
  EXPECT_EQ(offsetof(SamePayload, tensor), 8u);
  EXPECT_EQ(offsetof(RecordHeader, length), 16u);
  EXPECT_EQ(offsetof(RecordHeader, sequence), 24u);
  EXPECT_EQ(offsetof(TensorDesc, data_offset), 16u);
  EXPECT_EQ(kRingControlBytes, 4096u);
  EXPECT_EQ(recordLength(0), 64u);
  EXPECT_EQ(recordLength(32), 64u);
  EXPECT_EQ(recordLength(33), 128u);
}

TEST(RingFormat, AClientOfAnotherReleaseIsRefusedNamingBothVersions) {
  auto p = RingProducer::create(kMinRingBytes);
  ASSERT_TRUE(p.has_value());
  const uint32_t old_version = 6;  // before the producer's NaN/inf scan bits
  std::memcpy(p->mappedBase() + offsetof(RingControl, version), &old_version, 4);
  auto c = RingConsumer::attach(dupFd(p->memfd()), p->mappedBytes(), 1ull << 30);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("ring format is version 6, this dumpd reads version 7"),
            std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("different dumpd releases"), std::string::npos);
}

TEST(Ring, RecordsArriveWholeAndInOrder) {
  Pair r = makePair(kMinRingBytes);
  for (int i = 0; i < 3; ++i) {
    std::byte* body = r.producer.tryReserve(RecordKind::kOp, 100);
    ASSERT_NE(body, nullptr);
    std::memset(body, 'a' + i, 100);
    EXPECT_EQ(r.producer.commit(), static_cast<uint64_t>(i + 1));
  }
  for (int i = 0; i < 3; ++i) {
    auto rec = r.consumer.next();
    ASSERT_TRUE(rec.has_value());
    ASSERT_TRUE(rec->has_value());
    EXPECT_EQ((*rec)->kind, RecordKind::kOp);
    EXPECT_EQ((*rec)->sequence, static_cast<uint64_t>(i + 1));
    EXPECT_EQ((*rec)->body_bytes, 100u);
    EXPECT_EQ(static_cast<char>((*rec)->body[99]), 'a' + i);
    (void)r.consumer.release((*rec)->end);
  }
  auto none = r.consumer.next();
  ASSERT_TRUE(none.has_value());
  EXPECT_FALSE(none->has_value());
}

TEST(Ring, UncommittedReservationIsInvisible) {
  Pair r = makePair(kMinRingBytes);
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 10), nullptr);
  auto rec = r.consumer.next();
  ASSERT_TRUE(rec.has_value());
  EXPECT_FALSE(rec->has_value());
}

TEST(Ring, FullRingRefusesUntilReleased) {
  Pair r = makePair(kMinRingBytes);
  const uint64_t body = kMinRingBytes / 4 - sizeof(RecordHeader);
  for (int i = 0; i < 4; ++i) {
    ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, body), nullptr);
    r.producer.commit();
  }
  EXPECT_EQ(r.producer.tryReserve(RecordKind::kOp, 1), nullptr);
  auto rec = r.consumer.next();
  ASSERT_TRUE(rec.has_value() && rec->has_value());
  EXPECT_EQ(r.producer.tryReserve(RecordKind::kOp, 1), nullptr) << "read but not released";
  (void)r.consumer.release((*rec)->end);
  EXPECT_NE(r.producer.tryReserve(RecordKind::kOp, body), nullptr);
}

TEST(Ring, WrapsWithPadRecord) {
  Pair r = makePair(kMinRingBytes);
  const uint64_t big = kMinRingBytes / 2 - sizeof(RecordHeader);  // half the ring
  // Fill 3/4 and drain, so the next half-ring record cannot fit before the end.
  for (uint64_t body : {big, kMinRingBytes / 4 - sizeof(RecordHeader)}) {
    ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, body), nullptr);
    r.producer.commit();
    auto rec = r.consumer.next();
    ASSERT_TRUE(rec.has_value() && rec->has_value());
    (void)r.consumer.release((*rec)->end);
  }
  std::byte* body = r.producer.tryReserve(RecordKind::kOp, big);
  ASSERT_NE(body, nullptr);
  std::memset(body, 0x5a, big);
  r.producer.commit();
  auto pad = r.consumer.next();
  ASSERT_TRUE(pad.has_value() && pad->has_value());
  EXPECT_EQ((*pad)->kind, RecordKind::kPad);
  auto rec = r.consumer.next();
  ASSERT_TRUE(rec.has_value() && rec->has_value());
  EXPECT_EQ((*rec)->kind, RecordKind::kOp);
  EXPECT_EQ((*rec)->sequence, 3u);
  EXPECT_EQ(static_cast<unsigned char>((*rec)->body[big - 1]), 0x5a);
}

TEST(Ring, TooLargeRecordNeverFits) {
  Pair r = makePair(kMinRingBytes);
  EXPECT_FALSE(r.producer.fits(kMinRingBytes));
  EXPECT_FALSE(r.producer.waitForSpace(kMinRingBytes, 10));
}

TEST(Ring, CorruptHeaderIsAnErrorNotACrash) {
  Pair r = makePair(kMinRingBytes);
  std::byte* body = r.producer.tryReserve(RecordKind::kOp, 16);
  ASSERT_NE(body, nullptr);
  r.producer.commit();
  // Scribble over the committed header, as a hostile client could.
  RecordHeader* h = reinterpret_cast<RecordHeader*>(body - sizeof(RecordHeader));
  h->length = 1ull << 40;
  auto rec = r.consumer.next();
  ASSERT_FALSE(rec.has_value());
  EXPECT_NE(rec.error().message.find("bad length"), std::string::npos);
}

TEST(Ring, HeadBeyondCapacityIsAnError) {
  Pair r = makePair(kMinRingBytes);
  r.producer.control()->head.store(kMinRingBytes * 3);
  auto rec = r.consumer.next();
  ASSERT_FALSE(rec.has_value());
  EXPECT_NE(rec.error().message.find("outside the valid window"), std::string::npos);
}

TEST(Ring, TheCommittedPositionIsCappedAtOneRingBeyondWhatWasReleased) {
  Pair r = makePair(kMinRingBytes);
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  r.producer.commit();
  const uint64_t head = r.producer.control()->head.load();
  EXPECT_EQ(r.consumer.committedPosition(), head);
  // A forged head (runtime control takes this as where the client stood).
  r.producer.control()->head.store(uint64_t{1} << 62);
  EXPECT_EQ(r.consumer.committedPosition(), r.consumer.capacity());
}

TEST(Ring, TheProducersStepIsPublishedForStatusAndAForgedOneIsIgnored) {
  Pair r = makePair(kMinRingBytes);
  EXPECT_EQ(r.consumer.producerStep(), std::nullopt);  // none yet (or an older client)
  r.producer.publishStep(0);
  EXPECT_EQ(r.consumer.producerStep(), 0u);
  r.producer.publishStep(UINT32_MAX);
  EXPECT_EQ(r.consumer.producerStep(), UINT32_MAX);
  r.producer.control()->producer_step.store(uint64_t{1} << 40);  // not an iteration
  EXPECT_EQ(r.consumer.producerStep(), std::nullopt);
}

TEST(Ring, SequenceGapIsAnError) {
  Pair r = makePair(kMinRingBytes);
  std::byte* body = r.producer.tryReserve(RecordKind::kOp, 16);
  r.producer.commit();
  reinterpret_cast<RecordHeader*>(body - sizeof(RecordHeader))->sequence = 7;
  auto rec = r.consumer.next();
  ASSERT_FALSE(rec.has_value());
  EXPECT_NE(rec.error().message.find("sequence 7"), std::string::npos);
}

TEST(RingAttach, RejectsUnsealedMemfd) {
  UniqueFd fd(::memfd_create("x", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_EQ(::ftruncate(fd.get(), kRingControlBytes + kMinRingBytes), 0);
  auto c = RingConsumer::attach(std::move(fd), kRingControlBytes + kMinRingBytes, 1ull << 30);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("not sealed"), std::string::npos);
}

TEST(RingAttach, RejectsRingThatLiesAboutItsSize) {
  auto p = RingProducer::create(kMinRingBytes);
  ASSERT_TRUE(p.has_value());
  auto c = RingConsumer::attach(dupFd(p->memfd()), p->mappedBytes() * 4, 1ull << 30);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("memfd holds"), std::string::npos);
}

TEST(RingAttach, RejectsNonMemfd) {
  UniqueFd fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  auto c = RingConsumer::attach(std::move(fd), kRingControlBytes + kMinRingBytes, 1ull << 30);
  ASSERT_FALSE(c.has_value());
}

TEST(RingAttach, RejectsRingAboveLimit) {
  auto p = RingProducer::create(1 << 20);
  ASSERT_TRUE(p.has_value());
  auto c = RingConsumer::attach(dupFd(p->memfd()), p->mappedBytes(), 256 * 1024);
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code, ErrorCode::kResourceExhausted);
}

TEST(Ring, ProducerAndConsumerThreadsStreamEveryRecord) {
  Pair r = makePair(256 * 1024);
  constexpr int kRecords = 20000;
  std::thread producer([&] {
    for (int i = 0; i < kRecords; ++i) {
      const uint64_t body = 8 + static_cast<uint64_t>(i % 7) * 1000;
      std::byte* p;
      while ((p = r.producer.tryReserve(RecordKind::kOp, body)) == nullptr) {
        ASSERT_TRUE(r.producer.waitForSpace(body, 5000));
      }
      std::memcpy(p, &i, sizeof i);
      r.producer.commit();
    }
  });
  int expect = 0;
  while (expect < kRecords) {
    auto rec = r.consumer.next();
    ASSERT_TRUE(rec.has_value()) << rec.error().message;
    if (!rec->has_value()) {
      r.consumer.waitForData(1000);
      continue;
    }
    if ((*rec)->kind == RecordKind::kOp) {
      int v;
      std::memcpy(&v, (*rec)->body, sizeof v);
      ASSERT_EQ(v, expect);
      ++expect;
    }
    if (r.consumer.release((*rec)->end)) r.consumer.wakeProducer();
  }
  producer.join();
}

TEST(RingClosing, ProducerStartsNoRecordOnceClosing) {
  Pair r = makePair(kMinRingBytes);
  EXPECT_FALSE(r.producer.closing());
  r.consumer.setClosing();
  EXPECT_TRUE(r.producer.closing());
  EXPECT_EQ(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  EXPECT_FALSE(r.consumer.producerBusy());
}

TEST(RingClosing, BusyFlagSpansAReservationUntilCommit) {
  Pair r = makePair(kMinRingBytes);
  EXPECT_FALSE(r.consumer.producerBusy());
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  EXPECT_TRUE(r.consumer.producerBusy());
  // Closing while a record is open: the producer may still commit it, and the daemon sees
  // busy until it has.
  r.consumer.setClosing();
  EXPECT_TRUE(r.consumer.producerBusy());
  r.producer.commit();
  EXPECT_FALSE(r.consumer.producerBusy());
  auto rec = r.consumer.next();
  ASSERT_TRUE(rec.has_value() && rec->has_value());
  EXPECT_EQ(r.producer.tryReserve(RecordKind::kOp, 16), nullptr) << "closing is set";
}

TEST(RingClosing, AbandonClearsBusy) {
  Pair r = makePair(kMinRingBytes);
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  r.producer.abandon();
  EXPECT_FALSE(r.consumer.producerBusy());
  EXPECT_FALSE(r.consumer.next()->has_value());
}

TEST(RingClosing, SetClosingWakesAProducerWaitingForSpace) {
  Pair r = makePair(kMinRingBytes);
  const uint64_t big = r.producer.maxBodyBytes();
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, big), nullptr);
  r.producer.commit();
  const auto start = std::chrono::steady_clock::now();
  std::thread closer([&] {
    while (r.producer.control()->producer_waiting.load() == 0) std::this_thread::yield();
    r.consumer.setClosing();
  });
  EXPECT_FALSE(r.producer.waitForSpace(big, 60000));
  closer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_TRUE(r.producer.closing());
}

TEST(RingWake, WakeConsumerEndsAWaitForData) {
  Pair r = makePair(kMinRingBytes);
  const auto start = std::chrono::steady_clock::now();
  std::thread waker([&] {
    while (r.producer.control()->consumer_waiting.load() == 0) std::this_thread::yield();
    r.consumer.wakeConsumer();
  });
  r.consumer.waitForData(60000);
  waker.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(RingWake, ReleaseReportsAWaitingProducer) {
  Pair r = makePair(kMinRingBytes);
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  r.producer.commit();
  auto rec = r.consumer.next();
  ASSERT_TRUE(rec.has_value() && rec->has_value());
  EXPECT_FALSE(r.consumer.release((*rec)->end));
  r.producer.control()->producer_waiting.store(1);
  EXPECT_FALSE(r.consumer.release((*rec)->end)) << "nothing new released";
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, 16), nullptr);
  r.producer.commit();
  rec = r.consumer.next();
  ASSERT_TRUE(rec.has_value() && rec->has_value());
  EXPECT_TRUE(r.consumer.release((*rec)->end));
}

TEST(RingWake, AProducerStartingToWaitWakesAConsumerThatAskedForIt) {
  // The flight recorder's daemon holds records: it must learn at once that the producer
  // waits, to discard the oldest kept iteration (training never blocks on the recorder).
  Pair r = makePair(kMinRingBytes);
  const uint64_t big = r.producer.maxBodyBytes();
  ASSERT_NE(r.producer.tryReserve(RecordKind::kOp, big), nullptr);
  r.producer.commit();
  auto rec = r.consumer.next();
  ASSERT_TRUE(rec.has_value() && rec->has_value());  // read, held: the ring stays full
  std::thread producer([&] {
    while (r.producer.control()->consumer_waiting.load() == 0) std::this_thread::yield();
    EXPECT_TRUE(r.producer.waitForSpace(big, 60000));
  });
  const auto start = std::chrono::steady_clock::now();
  r.consumer.waitForData(60000, /*wake_on_producer_wait=*/true);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_TRUE(r.consumer.producerWaiting());
  if (r.consumer.release((*rec)->end)) r.consumer.wakeProducer();
  producer.join();
}

TEST(RingWake, AWaitingProducerDoesNotEndAWaitThatDidNotAskForIt) {
  Pair r = makePair(kMinRingBytes);
  r.producer.control()->producer_waiting.store(1);
  const auto start = std::chrono::steady_clock::now();
  r.consumer.waitForData(100);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(90))
      << "the drain of a session without held records must not spin";
}

TEST(RingAttach, RejectsSparseMemfd) {
  // Sealed and sized like a real ring, but never written: the daemon must not fault it in.
  UniqueFd fd(::memfd_create("x", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  const uint64_t total = kRingControlBytes + kMinRingBytes;
  ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(total)), 0);
  ASSERT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  auto c = RingConsumer::attach(std::move(fd), total, 1ull << 30);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("sparse"), std::string::npos) << c.error().message;
}

TEST(RingAttach, RejectsMemfdThatCanGrow) {
  UniqueFd fd(::memfd_create("x", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  const uint64_t total = kRingControlBytes + kMinRingBytes;
  ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(total)), 0);
  ASSERT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  auto c = RingConsumer::attach(std::move(fd), total, 1ull << 30);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("growing"), std::string::npos) << c.error().message;
}

}  // namespace
}  // namespace dumpd::ipc
