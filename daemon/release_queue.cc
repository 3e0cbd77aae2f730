#include "daemon/release_queue.h"

namespace dumpd::daemon {

ReleaseQueue::ReleaseQueue(ipc::RingConsumer& ring, std::function<void(uint64_t)> on_done)
    : ring_(ring), on_done_(std::move(on_done)) {}

uint64_t ReleaseQueue::push(uint64_t end, uint64_t sequence, bool done) {
  std::pair<bool, uint64_t> r{false, 0};
  uint64_t slot;
  {
    MutexLock lock(&mu_);
    pending_.push_back({end, sequence, done});
    slot = first_slot_ + pending_.size() - 1;
    if (done) r = advanceLocked();
  }
  afterAdvance(r);
  return slot;
}

void ReleaseQueue::markDone(uint64_t slot) {
  std::pair<bool, uint64_t> r;
  {
    MutexLock lock(&mu_);
    pending_[slot - first_slot_].done = true;
    r = advanceLocked();
  }
  afterAdvance(r);
}

void ReleaseQueue::waitIdle() {
  MutexLock lock(&mu_);
  while (!pending_.empty()) idle_cv_.wait(&mu_);
}

std::pair<bool, uint64_t> ReleaseQueue::advanceLocked() {
  uint64_t release_end = 0;
  uint64_t last_sequence = 0;
  while (!pending_.empty() && pending_.front().done) {
    release_end = pending_.front().end;
    if (pending_.front().sequence != 0) last_sequence = pending_.front().sequence;
    pending_.pop_front();
    ++first_slot_;
  }
  // The tail store stays under the lock: release() needs non-decreasing ends.
  const bool wake = release_end != 0 && ring_.release(release_end);
  if (last_sequence != 0) {
    // Release: pairs with the acquire in doneSequence(); files of these records are written.
    done_sequence_.store(last_sequence, std::memory_order_release);
  }
  if (pending_.empty()) idle_cv_.signalAll();
  return {wake, last_sequence};
}

void ReleaseQueue::afterAdvance(std::pair<bool, uint64_t> r) {
  if (r.first) ring_.wakeProducer();
  if (r.second != 0 && on_done_) on_done_(r.second);
}

}  // namespace dumpd::daemon
