// A budget of bytes shared by many users (sessions, jobs): charges succeed while the total stays
// within the limit. Lock-free; a refused charge leaves nothing charged. A budget may have a
// parent (a uid's share of the daemon's budget): a charge must fit both.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace dumpd {

class ByteBudget {
 public:
  // `limit` 0: unlimited (charges always succeed, and are still counted). With a parent:
  // this budget's first `floor` bytes need only fit the parent; past them, a charge must
  // leave `parent_reserve` bytes of the parent free (room kept for the parent's other
  // children that hold little: a uid over its floor cannot take the last of the daemon's).
  explicit ByteBudget(uint64_t limit, std::shared_ptr<ByteBudget> parent = nullptr,
                      uint64_t floor = UINT64_MAX, uint64_t parent_reserve = 0)
      : limit_(limit), floor_(floor), parent_reserve_(parent_reserve), parent_(std::move(parent)) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Charges `bytes` when the total stays within the limit less `leave` (and the parent's);
  // false (nothing charged) otherwise.
  bool tryCharge(uint64_t bytes, uint64_t leave = 0) {
    uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (limit_ != 0 &&
          (leave >= limit_ || bytes > limit_ - leave || used > limit_ - leave - bytes)) {
        return false;
      }
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    if (parent_ && !parent_->tryCharge(bytes, used + bytes > floor_ ? parent_reserve_ : 0)) {
      used_.fetch_sub(bytes, std::memory_order_relaxed);
      return false;
    }
    return true;
  }
  // Gives back bytes charged before.
  void release(uint64_t bytes) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    if (parent_) parent_->release(bytes);
  }

  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  const uint64_t floor_;
  const uint64_t parent_reserve_;
  const std::shared_ptr<ByteBudget> parent_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace dumpd
