// The first NaN or infinity in execution order among the records a trigger writes, found by
// the writers as they write them (docs/recorder.md). A recorder with a "nan" or "inf" trigger
// checks each record as it keeps it; any other recorder (loss_spike, manual, crash) has
// its records checked here, on the writer threads, only when a trigger writes them: the
// trigger's journal line then names the first offending op whatever was configured.
//
// Thread-safety: every method may be called from any thread; mu_ guards the candidate only.
#pragma once

#include <cstdint>
#include <optional>

#include "base/mutex.h"
#include "daemon/trigger_outcome.h"

namespace dumpd::daemon {

class FirstNonFinite {
 public:
  // A record (ring `sequence`: execution order) holding `found`: kept when it comes before
  // every other offered since the last take().
  void offer(uint64_t sequence, TriggerEvent::NonFinite found) {
    MutexLock lock(&mu_);
    if (!first_ || sequence < sequence_) {
      first_ = std::move(found);
      sequence_ = sequence;
    }
  }
  // Whether a record at `sequence` could still be the first (none earlier was offered): the
  // writers skip the check of records that cannot.
  bool couldBeFirst(uint64_t sequence) {
    MutexLock lock(&mu_);
    return !first_ || sequence < sequence_;
  }
  // The first one offered, and forgets it.
  std::optional<TriggerEvent::NonFinite> take() {
    MutexLock lock(&mu_);
    std::optional<TriggerEvent::NonFinite> out = std::move(first_);
    first_.reset();
    return out;
  }

 private:
  Mutex mu_;
  std::optional<TriggerEvent::NonFinite> first_ GUARDED_BY(mu_);
  uint64_t sequence_ GUARDED_BY(mu_) = 0;
};

}  // namespace dumpd::daemon
