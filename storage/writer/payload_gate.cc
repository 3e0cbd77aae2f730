#include "storage/writer/payload_gate.h"

#include <algorithm>

namespace dumpd::storage {
namespace {

// With a free-space floor, statvfs is asked again after at most this many payload bytes.
constexpr uint64_t kFreeSpaceRecheckBytes = uint64_t{64} << 20;

}  // namespace

PayloadGate::PayloadGate(std::shared_ptr<FileSystem> fs, uint64_t quota_bytes,
                         uint64_t min_free_bytes, std::shared_ptr<QuotaAccount> account,
                         uint64_t journal_bytes)
    : fs_(std::move(fs)),
      quota_bytes_(quota_bytes),
      min_free_bytes_(min_free_bytes),
      journal_bytes_(journal_bytes),
      account_(account ? std::move(account) : std::make_shared<QuotaAccount>()) {}

Result<bool> PayloadGate::admit(uint64_t bytes) {
  if (stopped()) return false;
  // Relaxed: payload_bytes is a running total; nothing else is published through it.
  std::atomic<uint64_t>& total = account_->payload_bytes;
  if (quota_bytes_ != 0) {
    uint64_t before = total.fetch_add(bytes, std::memory_order_relaxed);
    if (before + bytes > quota_bytes_) {
      total.fetch_sub(bytes, std::memory_order_relaxed);
      stop("job quota of " + std::to_string(quota_bytes_) +
           " bytes reached: payload files stopped, statistics continue");
      return false;
    }
  }
  Result<bool> space = admitFreeSpace(bytes);
  if (!space || !space.value()) {
    if (quota_bytes_ != 0) total.fetch_sub(bytes, std::memory_order_relaxed);
  }
  return space;
}

Result<bool> PayloadGate::admitJournal(uint64_t bytes) {
  std::atomic<uint64_t>& total = account_->journal_bytes;
  if (journal_bytes_ != 0) {
    uint64_t before = total.fetch_add(bytes, std::memory_order_relaxed);
    if (before + bytes > journal_bytes_) {
      total.fetch_sub(bytes, std::memory_order_relaxed);
      MutexLock lock(&mu_);
      journal_refusal_ = "the job's journal allowance of " + std::to_string(journal_bytes_) +
                         " bytes is used up (journal_bytes)";
      return false;
    }
  }
  Result<bool> space = admitFreeSpace(bytes);
  if (!space || !space.value()) {
    if (journal_bytes_ != 0) total.fetch_sub(bytes, std::memory_order_relaxed);
    if (space) {
      MutexLock lock(&mu_);
      journal_refusal_ = "free space below min_free_bytes (" + std::to_string(min_free_bytes_) +
                         " bytes kept free)";
    }
  }
  return space;
}

std::string PayloadGate::journalRefusal() const {
  MutexLock lock(&mu_);
  return journal_refusal_;
}

Result<bool> PayloadGate::admitFreeSpace(uint64_t bytes) {
  if (min_free_bytes_ == 0) return true;
  const auto need = static_cast<int64_t>(bytes);
  // Relaxed: the budget is a counter; the recheck below is serialised by mu_.
  if (free_budget_.fetch_sub(need, std::memory_order_relaxed) >= need) return true;
  free_budget_.fetch_add(need, std::memory_order_relaxed);
  MutexLock lock(&mu_);
  if (free_budget_.fetch_sub(need, std::memory_order_relaxed) >= need) return true;  // refreshed
  free_budget_.fetch_add(need, std::memory_order_relaxed);
  auto free = fs_->freeBytes();
  if (!free) return free.error();
  if (free.value() < min_free_bytes_ + bytes) {
    if (stop_reason_.empty()) {
      stop_reason_ = "free space below min_free_bytes (" + std::to_string(free.value()) +
                     " bytes free, " + std::to_string(min_free_bytes_) +
                     " kept free): payload files stopped, statistics continue";
    }
    stopped_.store(true, std::memory_order_release);
    return false;
  }
  uint64_t allowed = std::min(free.value() - min_free_bytes_, kFreeSpaceRecheckBytes);
  free_budget_.store(static_cast<int64_t>(allowed) - need, std::memory_order_relaxed);
  return true;
}

void PayloadGate::release(uint64_t reserved, uint64_t actual) {
  if (quota_bytes_ == 0) return;
  account_->payload_bytes.fetch_add(actual, std::memory_order_relaxed);
  account_->payload_bytes.fetch_sub(reserved, std::memory_order_relaxed);
}

void PayloadGate::stop(const std::string& reason) {
  MutexLock lock(&mu_);
  if (stop_reason_.empty()) stop_reason_ = reason;
  stopped_.store(true, std::memory_order_release);
}

std::string PayloadGate::stopReason() const {
  MutexLock lock(&mu_);
  return stop_reason_;
}

}  // namespace dumpd::storage
