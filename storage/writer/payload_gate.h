// The payload gate of one job: every payload file (a tensor's bytes, a bin file, a repeat's
// new first file) is admitted against the job's quota and the file system's free-space floor
// before it is written, and charged what it really took after. Once either refuses, payloads
// stop for good (statistics rows continue) and the reason is kept for status. Journal lines
// pass the same free-space floor and a separate allowance of their own.
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

// What a job has written against its limits, shared by every session of the job (a client
// that reconnects is the same job: daemon/job_accounts.h).
struct QuotaAccount {
  std::atomic<uint64_t> payload_bytes{0};  // written plus reserved by writes in flight
  std::atomic<uint64_t> journal_bytes{0};  // journal lines appended
};

class PayloadGate {
 public:
  // `quota_bytes` 0: no quota; `min_free_bytes` 0: no floor; `journal_bytes` 0: journals
  // unlimited. `account` null: a new one, this gate's alone.
  PayloadGate(std::shared_ptr<FileSystem> fs, uint64_t quota_bytes, uint64_t min_free_bytes,
              std::shared_ptr<QuotaAccount> account = nullptr, uint64_t journal_bytes = 0);

  // Admission of a payload of `bytes`; false: dropped (stopReason() says why). An error is
  // the file system's (statvfs).
  Result<bool> admit(uint64_t bytes);
  // Admission of a journal line of `bytes` (control.jsonl, triggers.jsonl): within the job's
  // journal allowance and above the free-space floor. False: refused (journalRefusal() says
  // why). A line refused for the allowance leaves payloads alone; free space below the floor
  // stops them, as it would at their own next admission.
  Result<bool> admitJournal(uint64_t bytes);
  std::string journalRefusal() const;
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
  const uint64_t journal_bytes_;
  const std::shared_ptr<QuotaAccount> account_;
  // Release on stop: pairs with the acquire in stopped(), so a caller that sees it stopped
  // sees the reason too.
  std::atomic<bool> stopped_{false};
  std::atomic<int64_t> free_budget_{0};  // payload bytes allowed before statvfs is asked again
  mutable Mutex mu_;                     // serialises the statvfs rechecks
  std::string stop_reason_ GUARDED_BY(mu_);
  std::string journal_refusal_ GUARDED_BY(mu_);
};

}  // namespace dumpd::storage
