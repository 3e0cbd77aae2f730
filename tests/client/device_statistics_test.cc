// Statistics computed on the (fake) device: the pipeline puts one StatsPayload per tensor in
// the record instead of its bytes, computed on the producer's stream before later work there
// overwrites the tensor, in order with byte records, with or without snapshot staging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "client/device_pipeline.h"
#include "ipc/ring_format.h"
#include "tests/client/fake_device.h"
#include "tests/client/pipeline_fixture.h"

namespace dumpd::client {
namespace {

using testing::Fixture;
using testing::readRecords;

std::vector<float> values(uint64_t record, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>((static_cast<double>(i) - 0.4 * n) * 0.25 + record);
  }
  if (record % 4 == 1) v[n / 2] = std::numeric_limits<float>::quiet_NaN();
  if (record % 4 == 2) v[0] = -std::numeric_limits<float>::infinity();
  return v;
}

// What the test expects, summed here in element order.
ipc::StatsPayload expected(const std::vector<float>& v) {
  ipc::StatsPayload s{};
  s.count = v.size();
  s.max = -std::numeric_limits<double>::infinity();
  s.min = std::numeric_limits<double>::infinity();
  for (float f : v) {
    const double x = f;
    if (x != x) {
      ++s.nan;
      continue;
    }
    s.max = x > s.max ? x : s.max;
    s.min = x < s.min ? x : s.min;
    s.sum += x;
    s.sum_squares += x * x;
    s.negative += x < 0;
    s.positive += x > 0;
    s.zero += x == 0;
    s.negative_inf += std::isinf(x) && x < 0;
    s.positive_inf += std::isinf(x) && x > 0;
  }
  return s;
}

TEST(DeviceStatistics, StatsReplaceBytesInOrderAndSeeTheTensorAtDumpTime) {
  for (uint64_t staging : {uint64_t{0}, uint64_t{16 << 10}, uint64_t{16 << 20}}) {
    SCOPED_TRACE("staging " + std::to_string(staging));
    Fixture f({.devices = 1, .max_delay_us = 300});
    constexpr uint64_t kRecords = 60;
    std::vector<std::vector<std::byte>> bodies;
    std::vector<ipc::RingConsumer::Record> records;
    std::thread reader([&] { records = readRecords(f, kRecords, &bodies); });
    std::vector<void*> buffers;
    {
      DevicePipeline p(f.fake, f.producer, staging);
      StreamHandle s = f.fake->createStream().value();
      for (uint64_t r = 0; r < kRecords; ++r) {
        // Record: u64 number | StatsPayload of tensor 0 | 256 bytes of tensor 1.
        const size_t n = 100 + r * 37;
        const auto v = values(r, n);
        auto* stats_src = static_cast<float*>(f.fake->allocate(n * 4).value());
        auto* bytes_src = static_cast<unsigned char*>(f.fake->allocate(256).value());
        std::memcpy(stats_src, v.data(), n * 4);
        std::memset(bytes_src, static_cast<int>(r), 256);
        constexpr uint64_t kBody = 8 + sizeof(ipc::StatsPayload) + 256;
        std::byte* b = reserveOp(f, kBody);
        std::memcpy(b, &r, 8);
        DeviceCopy stats{b + 8, stats_src, n * 4, true, DType::kFloat32, n};
        DeviceCopy bytes{b + 8 + sizeof(ipc::StatsPayload), bytes_src, 256};
        const DeviceCopy copies[] = {stats, bytes};
        ASSERT_TRUE(p.submit(f.producer.reservedSequence(), 0, s, copies, 2));
        // Later work on the stream reuses both buffers.
        f.fake->enqueue(s, [stats_src, bytes_src, n] {
          std::memset(stats_src, 0x7f, n * 4);
          std::memset(bytes_src, 0xee, 256);
        });
        buffers.push_back(stats_src);
        buffers.push_back(bytes_src);
      }
      ASSERT_TRUE(p.drain(20000));
      EXPECT_EQ(p.counters().statistics, kRecords);
      EXPECT_EQ(f.fake->statisticsLaunches(), kRecords);
      EXPECT_EQ(f.fake->unpinnedHostCopies(), 0u);
    }
    reader.join();
    ASSERT_EQ(records.size(), kRecords);
    for (uint64_t r = 0; r < kRecords; ++r) {
      SCOPED_TRACE("record " + std::to_string(r));
      EXPECT_EQ(records[r].sequence, r + 1);
      uint64_t got = 0;
      std::memcpy(&got, bodies[r].data(), 8);
      ASSERT_EQ(got, r);
      ipc::StatsPayload s;
      std::memcpy(&s, bodies[r].data() + 8, sizeof s);
      const ipc::StatsPayload want = expected(values(r, 100 + r * 37));
      EXPECT_EQ(s.count, want.count);
      EXPECT_EQ(s.nan, want.nan);
      EXPECT_EQ(s.negative_inf, want.negative_inf);
      EXPECT_EQ(s.negative, want.negative);
      EXPECT_EQ(s.positive, want.positive);
      EXPECT_EQ(s.zero, want.zero);
      EXPECT_EQ(s.max, want.max);
      EXPECT_EQ(s.min, want.min);
      EXPECT_EQ(s.sum, want.sum);
      EXPECT_EQ(s.sum_squares, want.sum_squares);
      const std::byte* tail = bodies[r].data() + 8 + sizeof s;
      for (int i = 0; i < 256; ++i) ASSERT_EQ(tail[i], static_cast<std::byte>(r)) << i;
    }
    for (void* b : buffers) f.fake->free(b);
    EXPECT_EQ(f.fake->liveAllocations(), 0u) << "staging is freed";
  }
}

TEST(DeviceStatistics, StatisticsOnlyRecordsAreWrittenByTheKernelWithoutACopy) {
  // The statistics kernel writes its result into the record through the ring's mapping: no
  // device-to-host copy, no snapshot, nothing for the issuer, with or without staging.
  for (uint64_t staging : {uint64_t{0}, uint64_t{16 << 20}}) {
    SCOPED_TRACE("staging " + std::to_string(staging));
    Fixture f({.devices = 1, .max_delay_us = 100});
    constexpr uint64_t kRecords = 40;
    std::vector<std::vector<std::byte>> bodies;
    std::vector<ipc::RingConsumer::Record> records;
    std::thread reader([&] { records = readRecords(f, kRecords, &bodies); });
    std::vector<void*> buffers;
    {
      DevicePipeline p(f.fake, f.producer, staging);
      StreamHandle s = f.fake->createStream().value();
      for (uint64_t r = 0; r < kRecords; ++r) {
        const size_t n = 64 + r * 11;
        const auto v = values(r, n);
        auto* src = static_cast<float*>(f.fake->allocate(n * 4).value());
        std::memcpy(src, v.data(), n * 4);
        std::byte* b = reserveOp(f, sizeof(ipc::StatsPayload));
        const DeviceCopy copies[] = {DeviceCopy{b, src, n * 4, true, DType::kFloat32, n}};
        ASSERT_TRUE(p.submit(f.producer.reservedSequence(), 0, s, copies, 1));
        f.fake->enqueue(s, [src, n] { std::memset(src, 0x7f, n * 4); });
        buffers.push_back(src);
      }
      ASSERT_TRUE(p.drain(20000));
      EXPECT_EQ(f.fake->copies(), 0u) << "no snapshot and no device-to-host copy";
      EXPECT_EQ(f.fake->unpinnedHostCopies(), 0u) << "the kernel wrote mapped memory only";
      EXPECT_EQ(p.counters().failed_records, 0u);
      // The producer's time is counted: submit() as a whole, and the runtime calls within it.
      EXPECT_GT(p.counters().submit_ns, 0u);
      EXPECT_GE(p.counters().submit_ns, p.counters().enqueue_ns);
    }
    reader.join();
    ASSERT_EQ(records.size(), kRecords);
    for (uint64_t r = 0; r < kRecords; ++r) {
      ipc::StatsPayload got;
      std::memcpy(&got, bodies[r].data(), sizeof got);
      const ipc::StatsPayload want = expected(values(r, 64 + r * 11));
      EXPECT_EQ(got.count, want.count) << r;
      EXPECT_EQ(got.nan, want.nan) << r;
      EXPECT_EQ(got.sum, want.sum) << r;
      EXPECT_EQ(got.max, want.max) << r;
    }
    for (void* b : buffers) f.fake->free(b);
  }
}

TEST(DeviceStatistics, CounterWordsAreNeverSharedByLaunchesInFlight) {
  // One-kernel statistics take a counter word; two streams interleave on the fake device, and
  // a word is reused only once the record that took it completed. Beyond 4096 statistics in
  // flight (a stream held up by a long kernel) the pass takes two kernels and no word.
  Fixture f({.devices = 1, .max_delay_us = 50}, 8 << 20);
  std::vector<float> v(64, 1.5f);
  void* src = f.fake->allocate(v.size() * 4).value();
  std::memcpy(src, v.data(), v.size() * 4);
  constexpr uint64_t kHeld = 4200;
  constexpr uint64_t kFlowing = 3000;
  std::thread reader([&] { (void)readRecords(f, kHeld + kFlowing, nullptr); });
  {
    DevicePipeline p(f.fake, f.producer, 0);
    StreamHandle held = f.fake->createStream().value();
    StreamHandle other = f.fake->createStream().value();
    std::atomic<bool> release{false};
    f.fake->enqueue(held, [&release] {
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    auto submit = [&](StreamHandle s) {
      std::byte* b = reserveOp(f, sizeof(ipc::StatsPayload));
      const DeviceCopy copies[] = {DeviceCopy{b, src, v.size() * 4, true, DType::kFloat32, 64}};
      ASSERT_TRUE(p.submit(f.producer.reservedSequence(), 0, s, copies, 1));
    };
    for (uint64_t i = 0; i < kHeld; ++i) submit(held);
    EXPECT_EQ(f.fake->counterLaunches(), 4096u) << "every word is taken while none completed";
    release = true;
    ASSERT_TRUE(p.drain(60000));  // every word released by its record's completion
    for (uint64_t i = 0; i < kFlowing; ++i) submit(i % 2 ? held : other);
    ASSERT_TRUE(p.drain(60000));
    EXPECT_EQ(f.fake->counterConflicts(), 0u);
    EXPECT_GT(f.fake->counterLaunches(), 4096u) << "words are reused after completion";
    EXPECT_EQ(f.fake->statisticsLaunches(), kHeld + kFlowing);
  }
  reader.join();
  f.fake->free(src);
  EXPECT_EQ(f.fake->liveAllocations(), 0u) << "staging and counters are freed";
}

TEST(DeviceStatistics, TooManyStatisticsForStagingAreRefusedAndVoided) {
  // No snapshot staging: statistics get a small area of their own (8 MiB); an op whose
  // statistics scratch does not fit is refused, its record voided in place.
  Fixture f({.devices = 1, .max_delay_us = 0}, 8 << 20);
  DevicePipeline p(f.fake, f.producer, 0);
  std::vector<float> host(16, 1.0f);
  void* src = f.fake->allocate(64).value();
  std::memcpy(src, host.data(), 64);
  const size_t tensors = (8u << 20) / 256 + 1;  // each takes at least 256 bytes of staging
  const uint64_t body = tensors * sizeof(ipc::StatsPayload);
  std::byte* b = f.producer.tryReserve(ipc::RecordKind::kOp, body);
  ASSERT_NE(b, nullptr);
  std::vector<DeviceCopy> copies;
  for (size_t i = 0; i < tensors; ++i) {
    copies.push_back(
        DeviceCopy{b + i * sizeof(ipc::StatsPayload), src, 64, true, DType::kFloat32, 16});
  }
  const Status s =
      p.submit(f.producer.reservedSequence(), 0, nullptr, copies, static_cast<uint32_t>(tensors));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("device_staging_bytes"), std::string::npos) << s.error().message;
  (void)p.drain(10000);
  auto records = readRecords(f, 1, nullptr);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].kind, ipc::RecordKind::kVoid);
  f.fake->free(src);
}

}  // namespace
}  // namespace dumpd::client
