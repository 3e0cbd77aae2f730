// DevicePipeline against the fake device: copies complete late and in any order across
// streams; the ring must still publish records in reservation order with exact bytes.
#include "client/device_pipeline.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "tests/client/fake_device.h"
#include "tests/client/pipeline_fixture.h"

namespace dumpd::client {
namespace {

using testing::FakeDevice;
using testing::Fixture;
using testing::readRecords;

// A device buffer whose bytes are a function of (record, tensor).
std::vector<std::byte> pattern(uint64_t record, uint32_t tensor, size_t bytes) {
  std::vector<std::byte> v(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    v[i] = static_cast<std::byte>((record * 31 + tensor * 7 + i) & 0xff);
  }
  return v;
}

// Reserves a record of 8-byte header (the record number) + the tensors' bytes, submits the
// copies from freshly filled device buffers, then overwrites those buffers on the producer
// stream (as a caching allocator reusing the memory would).
struct Submitted {
  uint64_t sequence;
  std::vector<size_t> sizes;
};

Submitted submitRecord(Fixture& f, DevicePipeline& p, uint64_t record, std::vector<size_t> sizes,
                       int device, StreamHandle stream, Status* status = nullptr) {
  uint64_t body = 8;
  for (size_t n : sizes) body += n;
  std::byte* b = reserveOp(f, body);
  std::memcpy(b, &record, 8);
  std::vector<DeviceCopy> copies;
  std::vector<void*> bufs;
  std::byte* dst = b + 8;
  for (uint32_t t = 0; t < sizes.size(); ++t) {
    void* dev = f.fake->allocate(std::max<size_t>(sizes[t], 1)).value();
    const auto bytes = pattern(record, t, sizes[t]);
    if (sizes[t] != 0) std::memcpy(dev, bytes.data(), sizes[t]);
    copies.push_back(DeviceCopy{dst, dev, sizes[t]});
    bufs.push_back(dev);
    dst += sizes[t];
  }
  const uint64_t seq = f.producer.reservedSequence();
  Status s = p.submit(seq, device, stream, copies, static_cast<uint32_t>(sizes.size()));
  if (status != nullptr) *status = s;
  for (size_t t = 0; t < bufs.size(); ++t) {
    f.fake->enqueue(stream, [buf = bufs[t], n = sizes[t]] { std::memset(buf, 0xAB, n); });
  }
  return Submitted{seq, sizes};
}

void expectBody(const std::vector<std::byte>& body, uint64_t record,
                const std::vector<size_t>& sizes) {
  uint64_t got = 0;
  std::memcpy(&got, body.data(), 8);
  ASSERT_EQ(got, record);
  size_t off = 8;
  for (uint32_t t = 0; t < sizes.size(); ++t) {
    const auto want = pattern(record, t, sizes[t]);
    if (sizes[t] != 0 && std::memcmp(body.data() + off, want.data(), sizes[t]) != 0) {
      size_t i = 0;
      while (body[off + i] == want[i]) ++i;
      FAIL() << "record " << record << " tensor " << t << " differs from the bytes at dump "
             << "time at byte " << i << " of " << sizes[t] << ": got "
             << static_cast<int>(body[off + i]) << ", want " << static_cast<int>(want[i]);
    }
    off += sizes[t];
  }
}

TEST(DevicePipeline, LateOutOfOrderCopiesStillPublishInOrderWithExactBytes) {
  for (uint64_t staging : {uint64_t{0}, uint64_t{64 << 10}, uint64_t{16 << 20}}) {
    SCOPED_TRACE("staging " + std::to_string(staging));
    Fixture f({.devices = 2, .max_delay_us = 300});
    std::map<uint64_t, std::vector<size_t>> expect;  // record -> sizes
    size_t tensor_buffers = 0;                       // the test's own fake allocations
    std::vector<std::vector<std::byte>> bodies;
    std::vector<ipc::RingConsumer::Record> records;
    std::thread reader([&] { records = readRecords(f, 120, &bodies); });
    {
      DevicePipeline p(f.fake, f.producer, staging);
      StreamHandle s0 = f.fake->createStream().value();
      StreamHandle s1 = f.fake->createStream().value();
      for (uint64_t r = 0; r < 120; ++r) {
        if (r % 10 == 3) {  // a host-only record between device ones
          std::byte* b = reserveOp(f, 8);
          std::memcpy(b, &r, 8);
          f.producer.commit();
          expect[r] = {};
          continue;
        }
        std::vector<size_t> sizes = {1 + (r * 977) % 5000, 64, (r * 131) % 3000};
        // Alternate devices and streams: completions interleave across streams.
        submitRecord(f, p, r, sizes, static_cast<int>(r % 2), r % 3 == 0 ? s1 : s0);
        expect[r] = sizes;
        tensor_buffers += sizes.size();
      }
      ASSERT_TRUE(p.drain(20000));
      EXPECT_EQ(p.inFlight(), 0u);
      EXPECT_EQ(f.fake->unpinnedHostCopies(), 0u) << "every copy into the ring is pinned";
      EXPECT_EQ(f.fake->currentDevice(), 0) << "the producer's current device is restored";
    }
    reader.join();
    ASSERT_EQ(records.size(), 120u);
    for (uint64_t r = 0; r < 120; ++r) {
      EXPECT_EQ(records[r].sequence, r + 1);
      expectBody(bodies[r], r, expect[r]);
    }
    EXPECT_FALSE(f.fake->hostStillRegistered()) << "the ring is unpinned at the end";
    EXPECT_EQ(f.fake->liveAllocations(), tensor_buffers) << "staging is freed";
  }
}

TEST(DevicePipeline, FullStagingMakesTheProducerStreamWaitNotTheHost) {
  Fixture f({.devices = 1, .max_delay_us = 2000});
  DevicePipeline p(f.fake, f.producer, 8 << 10);  // two 4 KiB records fit
  StreamHandle s = f.fake->createStream().value();
  std::vector<std::vector<std::byte>> bodies;
  std::vector<ipc::RingConsumer::Record> records;
  std::thread reader([&] { records = readRecords(f, 40, &bodies); });
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t r = 0; r < 40; ++r) submitRecord(f, p, r, {4000}, 0, s);
  const auto submit_time = std::chrono::steady_clock::now() - start;
  // 40 records x 4+ operations x up to 2 ms each: the device needs far longer than 80 ms.
  EXPECT_LT(submit_time, std::chrono::milliseconds(80)) << "submit blocked the host";
  EXPECT_GT(p.counters().staging_waits, 0u);
  ASSERT_TRUE(p.drain(30000));
  reader.join();
  ASSERT_EQ(records.size(), 40u);
  for (uint64_t r = 0; r < 40; ++r) expectBody(bodies[r], r, {4000});
  EXPECT_EQ(p.counters().staged_records, 40u);
}

TEST(DevicePipeline, RecordLargerThanStagingIsCopiedOnTheProducerStream) {
  Fixture f({.devices = 1, .max_delay_us = 100});
  DevicePipeline p(f.fake, f.producer, 4096);
  StreamHandle s = f.fake->createStream().value();
  submitRecord(f, p, 7, {10000}, 0, s);
  submitRecord(f, p, 8, {100}, 0, s);
  ASSERT_TRUE(p.drain(10000));
  std::vector<std::vector<std::byte>> bodies;
  auto records = readRecords(f, 2, &bodies);
  ASSERT_EQ(records.size(), 2u);
  expectBody(bodies[0], 7, {10000});
  expectBody(bodies[1], 8, {100});
  EXPECT_EQ(p.counters().direct_records, 1u);
  EXPECT_EQ(p.counters().staged_records, 1u);
}

TEST(DevicePipeline, DrainWaitsForEveryCopyInFlight) {
  Fixture f({.devices = 1, .max_delay_us = 3000});
  DevicePipeline p(f.fake, f.producer, 1 << 20);
  StreamHandle s = f.fake->createStream().value();
  for (uint64_t r = 0; r < 10; ++r) submitRecord(f, p, r, {256}, 0, s);
  EXPECT_GT(p.inFlight(), 0u) << "copies take milliseconds each";
  EXPECT_LT(f.producer.lastSequence(), 10u);
  const auto timed_out = p.drain(0);
  EXPECT_FALSE(timed_out.has_value());
  EXPECT_EQ(timed_out.error().code, ErrorCode::kTimeout);
  ASSERT_TRUE(p.drain(-1));
  EXPECT_EQ(p.inFlight(), 0u);
  EXPECT_EQ(f.producer.lastSequence(), 10u) << "drain returns once all are published";
  EXPECT_EQ(f.producer.openReservations(), 0u);
  EXPECT_EQ(f.producer.control()->producer_busy.load(), 0u);
}

TEST(DevicePipeline, FailedCopyVoidsItsRecordAndLaterOnesKeepTheirPlace) {
  // Direct mode: one copy per one-tensor record, so copy number 2 is record 2's.
  Fixture f({.devices = 1, .max_delay_us = 200, .fail_copy_number = 2});
  DevicePipeline p(f.fake, f.producer, 0);
  StreamHandle s = f.fake->createStream().value();
  Status st[4];
  for (uint64_t r = 0; r < 4; ++r) submitRecord(f, p, r, {128}, 0, s, &st[r]);
  EXPECT_TRUE(st[0]);
  EXPECT_TRUE(st[1]);
  ASSERT_FALSE(st[2]);
  EXPECT_NE(st[2].error().message.find("injected copy failure"), std::string::npos);
  ASSERT_FALSE(st[3]) << "a device error is sticky";
  EXPECT_FALSE(p.drain(10000).has_value());
  std::vector<std::vector<std::byte>> bodies;
  auto records = readRecords(f, 4, &bodies);
  ASSERT_EQ(records.size(), 4u);
  expectBody(bodies[0], 0, {128});
  expectBody(bodies[1], 1, {128});
  for (int r = 2; r < 4; ++r) {
    EXPECT_EQ(records[r].kind, ipc::RecordKind::kVoid);
    EXPECT_EQ(records[r].sequence, static_cast<uint64_t>(r + 1));
    uint32_t lost = 0;
    std::memcpy(&lost, bodies[r].data(), 4);
    EXPECT_EQ(lost, 1u);
  }
  EXPECT_EQ(p.counters().failed_records, 2u);
}

TEST(DevicePipeline, AFailedRecordIsVoidedOnlyAfterItsEnqueuedCopiesRan) {
  // Direct mode, two tensors: copy 0 is enqueued behind a long kernel, copy 1 fails. Copy 0
  // still writes into the record's ring slot, so the record must not be voided (and its space
  // reused) before it ran: drain() returns only once it has.
  Fixture f({.devices = 1, .max_delay_us = 0, .fail_copy_number = 1});
  DevicePipeline p(f.fake, f.producer, 0);
  StreamHandle s = f.fake->createStream().value();
  f.fake->enqueue(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  const auto want = pattern(5, 0, 256);
  void* src = f.fake->allocate(256).value();
  std::memcpy(src, want.data(), 256);
  std::byte* b = f.producer.tryReserve(ipc::RecordKind::kOp, 512);
  ASSERT_NE(b, nullptr);
  const DeviceCopy copies[] = {DeviceCopy{b, src, 256}, DeviceCopy{b + 256, src, 256}};
  ASSERT_FALSE(p.submit(f.producer.reservedSequence(), 0, s, copies, 2));
  EXPECT_FALSE(p.drain(10000).has_value());
  // (The void record's own header, the lost-tensor count, takes the first bytes.)
  EXPECT_EQ(std::memcmp(b + 16, want.data() + 16, 240), 0) << "voided before its copy ran";
  auto records = readRecords(f, 1, nullptr);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].kind, ipc::RecordKind::kVoid);
  f.fake->free(src);
}

TEST(DevicePipeline, AsynchronousDeviceErrorVoidsTheRecord) {
  // Staged records record two events each (snapshot, done): event 3 is record 1's done.
  Fixture f({.devices = 1, .max_delay_us = 100, .fail_event_number = 3});
  DevicePipeline p(f.fake, f.producer, 1 << 20);
  StreamHandle s = f.fake->createStream().value();
  Status st[2];
  for (uint64_t r = 0; r < 2; ++r) submitRecord(f, p, r, {64}, 0, s, &st[r]);
  EXPECT_TRUE(st[0]);
  EXPECT_TRUE(st[1]) << "the failure only shows when the copy completes";
  const Status d = p.drain(10000);
  ASSERT_FALSE(d.has_value());
  EXPECT_NE(d.error().message.find("asynchronous failure"), std::string::npos);
  std::vector<std::vector<std::byte>> bodies;
  auto records = readRecords(f, 2, &bodies);
  ASSERT_EQ(records.size(), 2u);
  expectBody(bodies[0], 0, {64});
  EXPECT_EQ(records[1].kind, ipc::RecordKind::kVoid);
}

TEST(DevicePipeline, UnknownDeviceIsRefusedAndTheRecordVoided) {
  Fixture f({.devices = 1});
  DevicePipeline p(f.fake, f.producer, 1 << 20);
  Status st;
  submitRecord(f, p, 0, {64}, 0, nullptr, &st);
  ASSERT_TRUE(st);
  // Device 3 does not exist: refused before anything is enqueued.
  std::byte* b = f.producer.tryReserve(ipc::RecordKind::kOp, 72);
  ASSERT_NE(b, nullptr);
  std::vector<std::byte> host(64);
  const DeviceCopy c{b + 8, host.data(), 64};
  const Status bad = p.submit(f.producer.reservedSequence(), 3, nullptr, std::span(&c, 1), 1);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("device 3"), std::string::npos);
  ASSERT_TRUE(p.drain(10000));
  auto records = readRecords(f, 2, nullptr);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].kind, ipc::RecordKind::kOp);
  EXPECT_EQ(records[1].kind, ipc::RecordKind::kVoid);
}

}  // namespace
}  // namespace dumpd::client
