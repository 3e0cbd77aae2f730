// DevicePipeline's deferred records (a flight recorder keeping CUDA tensors on the device),
// against the fake device: no device-to-host copy until the daemon fetches; the fetch copies
// exactly the records it covers, with the bytes at dump time; held snapshots give way to new
// ones (the producer never waits for the recorder) and their records say so.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "client/device_pipeline.h"
#include "ipc/ring_format.h"
#include "tests/client/fake_device.h"
#include "tests/client/pipeline_fixture.h"

namespace dumpd::client {
namespace {

using testing::Fixture;
using testing::reserveOp;

constexpr uint64_t kElements = 1024;  // float32: 4 KiB a tensor

float valueOf(uint64_t record, uint64_t k) { return static_cast<float>(record * 10000 + k); }

struct Deferred {
  uint64_t sequence;
  std::byte* header;  // the DeferredPayload in the ring; the bytes follow
};

// Reserves a record holding one deferred float32 tensor (the header, then the bytes), submits
// it as iteration `iteration`, then overwrites the device buffer on the stream.
Deferred submitDeferred(Fixture& f, DevicePipeline& p, StreamHandle stream, uint64_t record,
                        uint32_t iteration) {
  std::byte* b = reserveOp(f, ipc::kDeferredHeaderBytes + kElements * 4);
  std::memset(b, 0, ipc::kDeferredHeaderBytes + kElements * 4);
  auto* dev = static_cast<float*>(f.fake->allocate(kElements * 4).value());
  for (uint64_t k = 0; k < kElements; ++k) dev[k] = valueOf(record, k);
  DeviceCopy c{b + ipc::kDeferredHeaderBytes, dev, kElements * 4};
  c.deferred = true;
  c.dtype = DType::kFloat32;
  c.elements = kElements;
  const uint64_t seq = f.producer.reservedSequence();
  EXPECT_TRUE(p.submit(seq, 0, stream, std::span(&c, 1), 1, iteration, f.producer.reservedEnd()));
  f.fake->enqueue(stream, [dev] { std::memset(dev, 0xCD, kElements * 4); });
  return Deferred{seq, b};
}

uint64_t stateOf(const Deferred& d) {
  auto* h = reinterpret_cast<ipc::DeferredPayload*>(d.header);
  return std::atomic_ref<uint64_t>(h->state).load(std::memory_order_acquire);
}

bool holdsValues(const Deferred& d, uint64_t record) {
  std::vector<float> want(kElements);
  for (uint64_t k = 0; k < kElements; ++k) want[k] = valueOf(record, k);
  return std::memcmp(d.header + ipc::kDeferredHeaderBytes, want.data(), kElements * 4) == 0;
}

// Waits until `d` leaves the "on the device" state (10 s at most).
uint64_t waitForState(const Deferred& d) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stateOf(d) == ipc::kDeferredOnDevice && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return stateOf(d);
}

TEST(DeviceDeferred, NothingCrossesUntilAFetchAndAFetchCopiesWhatItCovers) {
  Fixture f({.devices = 1, .max_delay_us = 200});
  DevicePipeline p(f.fake, f.producer, 1 << 20);
  StreamHandle s = f.fake->createStream().value();
  std::vector<Deferred> recs;
  for (uint64_t r = 0; r < 6; ++r) recs.push_back(submitDeferred(f, p, s, r, /*iteration=*/r));
  ASSERT_TRUE(p.drain(20000));
  // Committed, with the device's statistics, and no bytes.
  for (uint64_t r = 0; r < 6; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(stateOf(recs[r]), ipc::kDeferredOnDevice);
    EXPECT_FALSE(holdsValues(recs[r], r));
    const auto* h = reinterpret_cast<const ipc::DeferredPayload*>(recs[r].header);
    EXPECT_EQ(h->stats.count, kElements);
    EXPECT_EQ(h->stats.min, valueOf(r, 0));
    EXPECT_EQ(h->stats.max, valueOf(r, kElements - 1));
  }
  EXPECT_EQ(p.counters().deferred_records, 6u);
  EXPECT_EQ(p.counters().deferred_filled, 0u);
  // Records 2 and 3 (from record 2's sequence, iterations up to 3).
  f.consumer.requestFetch(recs[2].sequence, 3);
  EXPECT_EQ(waitForState(recs[2]), ipc::kDeferredFilled);
  EXPECT_EQ(waitForState(recs[3]), ipc::kDeferredFilled);
  EXPECT_TRUE(holdsValues(recs[2], 2)) << "the bytes at dump time, not the overwritten buffer";
  EXPECT_TRUE(holdsValues(recs[3], 3));
  // No fixed wait: the fetch marks every record it copies in one pass under the pipeline's
  // lock, which counters() takes, so once 2 and 3 are filled the count is final, and drain()
  // returns only when no copy is left in flight.
  EXPECT_EQ(p.counters().deferred_filled, 2u);
  ASSERT_TRUE(p.drain(20000));
  for (uint64_t r : {0, 1, 4, 5}) {
    EXPECT_EQ(stateOf(recs[r]), ipc::kDeferredOnDevice) << r;
    EXPECT_FALSE(holdsValues(recs[r], r)) << r;
  }
  EXPECT_EQ(p.counters().deferred_filled, 2u);
  // A record submitted later for an iteration the fetch covers is copied without asking.
  Deferred late = submitDeferred(f, p, s, 6, /*iteration=*/3);
  EXPECT_EQ(waitForState(late), ipc::kDeferredFilled);
  EXPECT_TRUE(holdsValues(late, 6));
}

TEST(DeviceDeferred, HeldSnapshotsGiveWayToNewOnesAndTheirRecordsSaySo) {
  Fixture f({.devices = 1, .max_delay_us = 100});
  // Room for about four records' snapshots (4 KiB + statistics scratch each).
  DevicePipeline p(f.fake, f.producer, 20 << 10);
  StreamHandle s = f.fake->createStream().value();
  std::vector<Deferred> recs;
  for (uint64_t r = 0; r < 2; ++r) recs.push_back(submitDeferred(f, p, s, r, 0));
  ASSERT_TRUE(p.drain(20000));
  // The daemon released record 0 (it discarded its iteration): its ring space is no longer
  // the record's, so giving its snapshot up must not write there.
  {
    auto r = f.consumer.next();
    ASSERT_TRUE(r.has_value() && r.value().has_value());
    ASSERT_EQ(r.value()->sequence, recs[0].sequence);
    ASSERT_FALSE(f.consumer.release(r.value()->end));
  }
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t r = 2; r < 12; ++r) recs.push_back(submitDeferred(f, p, s, r, r / 2));
  ASSERT_TRUE(p.drain(20000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  const PipelineCounters c = p.counters();
  EXPECT_EQ(c.deferred_records, 12u);
  EXPECT_GE(c.deferred_dropped, 6u);
  EXPECT_EQ(stateOf(recs[0]), ipc::kDeferredOnDevice) << "released: left alone";
  EXPECT_EQ(stateOf(recs[1]), ipc::kDeferredLost);
  EXPECT_EQ(stateOf(recs[11]), ipc::kDeferredOnDevice) << "the newest is still held";
  // A fetch of everything gets the records still held, with their bytes; the lost stay lost.
  f.consumer.requestFetch(recs[1].sequence, 100);
  EXPECT_EQ(waitForState(recs[11]), ipc::kDeferredFilled);
  size_t filled = 0;
  for (uint64_t r = 1; r < 12; ++r) {
    const uint64_t st = waitForState(recs[r]);
    ASSERT_NE(st, ipc::kDeferredOnDevice) << r;
    if (st == ipc::kDeferredFilled) {
      EXPECT_TRUE(holdsValues(recs[r], r)) << r;
      ++filled;
    }
  }
  // Every record but the dropped ones (record 0 among them) was filled.
  EXPECT_EQ(filled, 12u - p.counters().deferred_dropped);
  EXPECT_EQ(p.counters().deferred_filled, filled);
}

TEST(DeviceDeferred, TooLargeToHoldIsCopiedAtOnceAndMarkedFilled) {
  Fixture f({.devices = 1, .max_delay_us = 100});
  DevicePipeline p(f.fake, f.producer, 2 << 10);  // smaller than one tensor
  StreamHandle s = f.fake->createStream().value();
  Deferred d = submitDeferred(f, p, s, 7, 0);
  ASSERT_TRUE(p.drain(20000));
  EXPECT_EQ(stateOf(d), ipc::kDeferredFilled);
  EXPECT_TRUE(holdsValues(d, 7));
  EXPECT_EQ(reinterpret_cast<const ipc::DeferredPayload*>(d.header)->stats.count, kElements);
  EXPECT_EQ(p.counters().deferred_records, 0u);
}

}  // namespace
}  // namespace dumpd::client
