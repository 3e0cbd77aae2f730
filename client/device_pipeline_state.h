// DevicePipeline's per-device state and constants, shared by its translation units
// (device_pipeline.cc, device_pipeline_staging.cc, device_pipeline_hold.cc). Internal to
// dumpd_client.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>

#include "client/device_pipeline.h"

namespace dumpd::client {

inline constexpr uint64_t kStagingAlign = 256;  // copy engines like 256-byte aligned addresses
// Counter words for one-kernel statistics per device: a word is reused once the record that
// last took it completed; with more statistics than that in flight, a pass takes two kernels.
inline constexpr uint64_t kCounterWords = 4096;

inline uint64_t nanosSince(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t)
          .count());
}

struct DevicePipeline::DeviceState {
  int device = 0;
  StreamHandle copy_stream = nullptr;
  std::byte* staging = nullptr;
  uint64_t capacity = 0;
  uint64_t head = 0;  // producer thread: end of the newest staging region
  // Guarded by mu_: start of the oldest region still in use, and the ids of the entries
  // owning regions, oldest first.
  uint64_t tail = 0;
  std::deque<uint64_t> regions;
  // Space taken over from regions whose copies had not completed, up to guard_end: the
  // stream of the record that took it over waits for guard_event (the `done` of entry
  // guard_id), and so must every stream whose region reaches into that space later.
  EventHandle guard_event = nullptr;
  uint64_t guard_id = 0;
  uint64_t guard_end = 0;
  // Statistics counters (kCounterWords, or none): the producer takes them in order; the
  // completion thread releases those of each completed record.
  uint32_t* counters = nullptr;
  uint64_t next_counter = 0;
  std::atomic<uint64_t> counters_released{0};
  // Issuer: recorded after a fill's copies on copy_stream (created at the first fill).
  EventHandle fill_event = nullptr;
};

}  // namespace dumpd::client
