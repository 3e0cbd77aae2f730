#include "daemon/release_queue.h"

namespace dumpd::daemon {

ReleaseQueue::ReleaseQueue(ipc::RingConsumer& ring, std::function<void(uint64_t)> on_done)
    : ring_(ring), on_done_(std::move(on_done)) {}

uint64_t ReleaseQueue::push(uint64_t end, uint64_t sequence, bool done) {
  std::pair<bool, uint64_t> r{false, 0};
  uint64_t slot;
  {
    MutexLock lock(&mu_);
    pending_.push_back({end, sequence, done ? State::kDone : State::kInFlight});
    slot = first_slot_ + pending_.size() - 1;
    if (done) {
      r = advanceLocked();
    } else {
      ++in_flight_;
    }
  }
  afterAdvance(r);
  return slot;
}

void ReleaseQueue::markDone(uint64_t slot) {
  std::pair<bool, uint64_t> r;
  {
    MutexLock lock(&mu_);
    Pending& p = at(slot);
    if (p.state == State::kInFlight) --in_flight_;
    p.state = State::kDone;
    r = advanceLocked();
  }
  afterAdvance(r);
}

void ReleaseQueue::hold(uint64_t slot) {
  std::pair<bool, uint64_t> r;
  {
    MutexLock lock(&mu_);
    Pending& p = at(slot);
    if (p.state != State::kInFlight) return;
    p.state = State::kHeld;
    --in_flight_;
    r = advanceLocked();
  }
  afterAdvance(r);
}

void ReleaseQueue::write(uint64_t slot) {
  MutexLock lock(&mu_);
  Pending& p = at(slot);
  if (p.state != State::kHeld) return;
  p.state = State::kInFlight;
  ++in_flight_;
}

void ReleaseQueue::waitIdle() {
  MutexLock lock(&mu_);
  while (in_flight_ != 0) idle_cv_.wait(&mu_);
}

std::pair<bool, uint64_t> ReleaseQueue::advanceLocked() {
  uint64_t release_end = 0;
  uint64_t last_done = 0;
  while (!pending_.empty() && pending_.front().state == State::kDone) {
    release_end = pending_.front().end;
    if (pending_.front().sequence != 0) last_done = pending_.front().sequence;
    pending_.pop_front();
    ++first_slot_;
  }
  if (settled_slot_ < first_slot_) settled_slot_ = first_slot_;
  uint64_t last_settled = 0;
  while (settled_slot_ < first_slot_ + pending_.size() &&
         at(settled_slot_).state != State::kInFlight) {
    if (at(settled_slot_).sequence != 0) last_settled = at(settled_slot_).sequence;
    ++settled_slot_;
  }
  // The tail store stays under the lock: release() needs non-decreasing ends.
  const bool wake = release_end != 0 && ring_.release(release_end);
  if (last_done != 0) {
    // Release: pairs with the acquire in doneSequence(); files of these records are written.
    done_sequence_.store(last_done, std::memory_order_release);
  }
  // A popped done record was settled when it was done; the settled prefix reaches at least
  // as far as the done one.
  if (last_settled == 0 && last_done > settled_sequence_.load(std::memory_order_relaxed)) {
    last_settled = last_done;
  }
  if (last_settled != 0) settled_sequence_.store(last_settled, std::memory_order_release);
  if (in_flight_ == 0) idle_cv_.signalAll();
  return {wake, last_settled};
}

void ReleaseQueue::afterAdvance(std::pair<bool, uint64_t> r) {
  if (r.first) ring_.wakeProducer();
  if (r.second != 0 && on_done_) on_done_(r.second);
}

}  // namespace dumpd::daemon
