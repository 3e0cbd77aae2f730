// In-order release of ring space. Records complete on writer threads in any order; the
// producer may only reuse a record's bytes once it and every record before it are written.
//
// The flight recorder holds records (hold(): kept in the ring, not written, until a trigger
// writes them or they are discarded). A held record keeps the ring's tail where it is, but
// it is *settled*: nothing is waiting on a writer for it, so flushes and waitIdle() go past
// it. write() puts a held record back in flight (a trigger); markDone() ends either.
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
  // A record pushed not done is kept instead of written (the flight recorder).
  void hold(uint64_t slot);
  // A held record goes to a writer after all (a trigger). It is not settled again: a flush
  // that was answered past it stays answered.
  void write(uint64_t slot);
  // Blocks until no record is in flight (every pushed record is done or held).
  void waitIdle();
  // Every record up to this sequence number is done (its bytes may be reused).
  uint64_t doneSequence() const { return done_sequence_.load(std::memory_order_acquire); }
  // Every record up to this sequence number is done or held: what a flush waits for.
  // on_done runs with this value.
  uint64_t settledSequence() const { return settled_sequence_.load(std::memory_order_acquire); }

 private:
  enum class State : uint8_t { kInFlight, kHeld, kDone };
  struct Pending {
    uint64_t end;
    uint64_t sequence;
    State state;
  };
  Pending& at(uint64_t slot) REQUIRES(mu_) { return pending_[slot - first_slot_]; }
  // Pops the done prefix and publishes the ring tail (an atomic store, no syscall); moves
  // the settled prefix. Returns {producer needs a wake, newest settled sequence or 0}.
  std::pair<bool, uint64_t> advanceLocked() REQUIRES(mu_);
  void afterAdvance(std::pair<bool, uint64_t> r);

  ipc::RingConsumer& ring_;
  const std::function<void(uint64_t)> on_done_;
  Mutex mu_;
  CondVar idle_cv_;
  std::deque<Pending> pending_ GUARDED_BY(mu_);
  uint64_t first_slot_ GUARDED_BY(mu_) = 0;    // slot number of pending_.front()
  uint64_t settled_slot_ GUARDED_BY(mu_) = 0;  // first slot not settled (>= first_slot_)
  uint64_t in_flight_ GUARDED_BY(mu_) = 0;     // records pushed or written, not done
  std::atomic<uint64_t> done_sequence_{0};
  std::atomic<uint64_t> settled_sequence_{0};
};

}  // namespace dumpd::daemon
