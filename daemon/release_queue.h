// In-order release of ring space. Records complete on writer threads in any order; the
// producer may only reuse a record's bytes once it and every record before it are written.
//
// Thread-safety: push() from the session thread, markDone() from writer threads, the rest
// from any thread. mu_ guards the queue; it is never held across a syscall: the futex wake
// of a waiting producer and the done callback run after it is released.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>

#include "base/mutex.h"
#include "ipc/shm_ring.h"

namespace dumpd::daemon {

class ReleaseQueue {
 public:
  // `on_done(sequence)` runs (outside the lock) each time the done prefix grows past a
  // record with a sequence number; the session uses it to answer flushes.
  ReleaseQueue(ipc::RingConsumer& ring, std::function<void(uint64_t)> on_done);

  // Appends the record ending at ring position `end`; returns its slot for markDone().
  // `sequence` is 0 for pad records. A record pushed done is released at once if it is
  // at the front.
  uint64_t push(uint64_t end, uint64_t sequence, bool done);
  void markDone(uint64_t slot);
  // Blocks until every pushed record is done and released.
  void waitIdle();
  // Every record up to this sequence number is done.
  uint64_t doneSequence() const { return done_sequence_.load(std::memory_order_acquire); }

 private:
  struct Pending {
    uint64_t end;
    uint64_t sequence;
    bool done;
  };
  // Pops the done prefix and publishes the ring tail (an atomic store, no syscall).
  // Returns {producer needs a wake, newest done sequence or 0}.
  std::pair<bool, uint64_t> advanceLocked() REQUIRES(mu_);
  void afterAdvance(std::pair<bool, uint64_t> r);

  ipc::RingConsumer& ring_;
  const std::function<void(uint64_t)> on_done_;
  Mutex mu_;
  CondVar idle_cv_;
  std::deque<Pending> pending_ GUARDED_BY(mu_);
  uint64_t first_slot_ GUARDED_BY(mu_) = 0;  // slot number of pending_.front()
  std::atomic<uint64_t> done_sequence_{0};
};

}  // namespace dumpd::daemon
