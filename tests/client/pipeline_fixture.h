// A ring (producer and consumer ends) and a fake device for DevicePipeline tests.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "ipc/shm_ring.h"
#include "tests/client/fake_device.h"

namespace dumpd::testing {

struct Fixture {
  explicit Fixture(FakeDevice::Config cfg, uint64_t ring_bytes = 1 << 20)
      : fake(std::make_shared<FakeDevice>(cfg)),
        producer(ipc::RingProducer::create(ring_bytes).value()),
        consumer(ipc::RingConsumer::attach(UniqueFd(::fcntl(producer.memfd(), F_DUPFD_CLOEXEC, 0)),
                                           producer.mappedBytes(), 1ull << 30)
                     .value()) {}
  std::shared_ptr<FakeDevice> fake;
  ipc::RingProducer producer;
  ipc::RingConsumer consumer;
};

// Reserves an op record of `body` bytes, waiting for the reader to make room.
inline std::byte* reserveOp(Fixture& f, uint64_t body) {
  std::byte* b = nullptr;
  while ((b = f.producer.tryReserve(ipc::RecordKind::kOp, body)) == nullptr) {
    f.producer.waitForSpace(body, 10);
  }
  return b;
}

// Reads every record the ring publishes until `count` non-pad records were seen.
inline std::vector<ipc::RingConsumer::Record> readRecords(
    Fixture& f, size_t count, std::vector<std::vector<std::byte>>* bodies) {
  std::vector<ipc::RingConsumer::Record> out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (out.size() < count && std::chrono::steady_clock::now() < deadline) {
    auto r = f.consumer.next();
    EXPECT_TRUE(r.has_value()) << r.error().message;
    if (!r.has_value()) break;
    if (!r.value()) {
      f.consumer.waitForData(5);
      continue;
    }
    const auto rec = *r.value();
    if (rec.kind != ipc::RecordKind::kPad) {
      out.push_back(rec);
      if (bodies != nullptr) bodies->emplace_back(rec.body, rec.body + rec.body_bytes);
    }
    if (f.consumer.release(rec.end)) f.consumer.wakeProducer();
  }
  return out;
}

}  // namespace dumpd::testing
