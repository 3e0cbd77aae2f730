// The daemon memory flight recorders may hold with kept records (recorder_memory_bytes), and
// each uid's share of it: one uid's sessions hold at most a quarter, and past a floor of a
// sixteenth a uid's charge must leave a quarter of the total free. So uids that flood their
// recorders hold at most three quarters together, and the last quarter stays for uids that
// keep little: at least three of them get their floor whatever the others do.
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
  static constexpr uint64_t kUidFloorDivisor = 16;
  static constexpr uint64_t kReserveDivisor = 4;

  explicit RecorderBudgets(uint64_t total_bytes)
      : total_(std::make_shared<ByteBudget>(total_bytes)) {}

  // The budget the sessions of `uid` charge (within the total).
  std::shared_ptr<ByteBudget> forUid(uid_t uid) {
    MutexLock lock(&mu_);
    std::shared_ptr<ByteBudget>& b = per_uid_[uid];
    if (!b) {
      const uint64_t total = total_->limit();
      b = std::make_shared<ByteBudget>(total / kUidShareDivisor, total_, total / kUidFloorDivisor,
                                       total / kReserveDivisor);
    }
    return b;
  }
  const ByteBudget& total() const { return *total_; }

 private:
  const std::shared_ptr<ByteBudget> total_;
  Mutex mu_;
  std::map<uid_t, std::shared_ptr<ByteBudget>> per_uid_ GUARDED_BY(mu_);
};

}  // namespace dumpd::daemon
