// A simulated accelerator for the device pipeline's tests: "device memory" is host memory,
// and every stream is a thread running its queue in order, each operation after a random
// delay, so copies complete late and streams interleave in any order. Events and
// stream-waits follow CUDA's rules: a wait captures the event's latest record at call time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "client/device_api.h"

namespace dumpd::testing {

class FakeDevice final : public client::DeviceApi {
 public:
  struct Config {
    int devices = 2;
    int max_delay_us = 200;          // each queued operation sleeps [0, max_delay_us] first
    int64_t fail_copy_number = -1;   // copyAsync number N (0-based) fails at enqueue
    int64_t fail_event_number = -1;  // the Nth recordEvent completes with an error
    uint32_t seed = 1;
  };
  explicit FakeDevice(Config config);
  ~FakeDevice() override;

  std::string name() const override { return "fake"; }
  Result<int> deviceCount() override { return config_.devices; }
  Result<int> setDevice(int device) override;
  Result<void*> allocate(size_t bytes) override;
  void free(void* p) override;
  Status registerHost(void* host, size_t bytes) override;
  void unregisterHost(void* host) override;
  // "Device memory" is host memory: the same address, once registered.
  Result<void*> hostDevicePointer(void* host) override;
  Result<client::StreamHandle> createStream() override;
  void destroyStream(client::StreamHandle s) override;
  Result<client::EventHandle> createEvent(bool blocking_sync) override;
  void destroyEvent(client::EventHandle e) override;
  Status copyAsync(void* dst, const void* src, size_t bytes, client::StreamHandle s) override;
  // The fake has no copy engines: a snapshot is a copy like any other.
  Status snapshotAsync(void* dst, const void* src, size_t bytes, client::StreamHandle s) override {
    return copyAsync(dst, src, bytes, s);
  }
  // 64 bytes: the fake writes garbage there, so nothing may read scratch as a result.
  uint64_t statisticsScratchBytes(uint64_t) override { return 64; }
  // A sequential pass on the stream's thread, with its own element decoding. A counter is
  // held from the launch until the pass ran: taking one that is held, or not 0, is a
  // conflict (two launches that could run at once sharing a word).
  Status statisticsAsync(void* result, void* scratch, uint32_t* counter, const void* src,
                         uint64_t elements, DType dtype, client::StreamHandle s) override;
  Result<uint32_t*> counterWords(size_t count) override;
  uint64_t statisticsLaunches() const { return statistics_.load(); }
  uint64_t counterLaunches() const { return counter_launches_.load(); }
  uint64_t counterConflicts() const { return counter_conflicts_.load(); }
  Status recordEvent(client::EventHandle e, client::StreamHandle s) override;
  Status streamWaitEvent(client::StreamHandle s, client::EventHandle e) override;
  Status waitEvent(client::EventHandle e) override;
  Result<int> pointerDevice(const void*) override { return current_device_; }

  // A "kernel" on `s`: runs fn on the stream's thread in order (e.g. overwrite a tensor).
  void enqueue(client::StreamHandle s, std::function<void()> fn);
  // Blocks until every stream ran everything queued so far.
  void synchronize();

  int currentDevice() const;
  bool hostRegistered(const void* p, size_t bytes) const;
  // Copies whose host destination was outside registered (pinned) memory.
  uint64_t unpinnedHostCopies() const { return unpinned_copies_.load(); }
  uint64_t copies() const { return copies_.load(); }
  size_t liveAllocations() const;
  size_t liveEvents() const;
  bool hostStillRegistered() const;

 private:
  struct Event;
  struct Stream;
  Stream* streamOf(client::StreamHandle s);
  bool isHost(const void* p) const;

  Config config_;
  mutable std::mutex mu_;
  std::mt19937 rng_;
  std::vector<std::unique_ptr<Stream>> streams_;
  Stream* default_stream_ = nullptr;
  std::set<Event*> events_;
  std::vector<std::pair<uintptr_t, size_t>> allocations_;
  std::vector<std::pair<uintptr_t, size_t>> registered_;
  std::atomic<uint64_t> copies_{0};
  std::atomic<uint64_t> statistics_{0};
  std::atomic<uint64_t> counter_launches_{0};
  std::atomic<uint64_t> counter_conflicts_{0};
  std::set<uint32_t*> held_counters_;  // guarded by mu_
  std::atomic<uint64_t> unpinned_copies_{0};
  int64_t events_recorded_ = 0;
  static thread_local int current_device_;
};

}  // namespace dumpd::testing
