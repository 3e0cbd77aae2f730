// The daemon memory flight recorders may hold with kept records (recorder_memory_bytes), and
// each uid's share of it: one uid's sessions hold at most a quarter, so a job that floods its
// recorder cannot leave the other users' recorders with nothing.
//
// Thread-safety: every method may be called from any thread; mu_ guards the map only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>

#include "base/byte_budget.h"
#include "base/mutex.h"

namespace dumpd::daemon {

class RecorderBudgets {
 public:
  static constexpr uint64_t kUidShareDivisor = 4;

  explicit RecorderBudgets(uint64_t total_bytes)
      : total_(std::make_shared<ByteBudget>(total_bytes)) {}

  // The budget the sessions of `uid` charge (within the total).
  std::shared_ptr<ByteBudget> forUid(uid_t uid) {
    MutexLock lock(&mu_);
    std::shared_ptr<ByteBudget>& b = per_uid_[uid];
    if (!b) b = std::make_shared<ByteBudget>(total_->limit() / kUidShareDivisor, total_);
    return b;
  }
  const ByteBudget& total() const { return *total_; }

 private:
  const std::shared_ptr<ByteBudget> total_;
  Mutex mu_;
  std::map<uid_t, std::shared_ptr<ByteBudget>> per_uid_ GUARDED_BY(mu_);
};

}  // namespace dumpd::daemon
