// The payload gate of one job: every payload file (a tensor's bytes, a bin file, a repeat's
// new first file) is admitted against the job's quota and the file system's free-space floor
// before it is written, and charged what it really took after. Once either refuses, payloads
// stop for good (statistics rows continue) and the reason is kept for status.
//
// Thread-safety: every method may be called from any thread. Admission is lock-free until the
// free-space budget is used up; then one caller asks statvfs again under the mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "base/result.h"
#include "storage/fs/file_system.h"

namespace dumpd::storage {

class PayloadGate {
 public:
  // `quota_bytes` 0: no quota; `min_free_bytes` 0: no floor.
  PayloadGate(std::shared_ptr<FileSystem> fs, uint64_t quota_bytes, uint64_t min_free_bytes);

  // Admission of a payload of `bytes`; false: dropped (stopReason() says why). An error is
  // the file system's (statvfs).
  Result<bool> admit(uint64_t bytes);
  // After an admitted payload: it took `actual` of the `reserved` bytes (0 when it failed).
  void release(uint64_t reserved, uint64_t actual);

  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  std::string stopReason() const;

 private:
  Result<bool> admitFreeSpace(uint64_t bytes) EXCLUDES(mu_);
  void stop(const std::string& reason);

  const std::shared_ptr<FileSystem> fs_;
  const uint64_t quota_bytes_;
  const uint64_t min_free_bytes_;
  // Release on stop: pairs with the acquire in stopped(), so a caller that sees it stopped
  // sees the reason too.
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> payload_bytes_{0};  // written plus reserved by writes in flight
  std::atomic<int64_t> free_budget_{0};     // payload bytes allowed before statvfs is asked again
  mutable Mutex mu_;                        // serialises the statvfs rechecks
  std::string stop_reason_ GUARDED_BY(mu_);
};

}  // namespace dumpd::storage
