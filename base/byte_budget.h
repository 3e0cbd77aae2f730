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
  // `limit` 0: unlimited (charges always succeed, and are still counted).
  explicit ByteBudget(uint64_t limit, std::shared_ptr<ByteBudget> parent = nullptr)
      : limit_(limit), parent_(std::move(parent)) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Charges `bytes` when the total stays within the limit (and the parent's); false (nothing
  // charged) otherwise.
  bool tryCharge(uint64_t bytes) {
    uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (limit_ != 0 && (bytes > limit_ || used > limit_ - bytes)) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    if (parent_ && !parent_->tryCharge(bytes)) {
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
  const std::shared_ptr<ByteBudget> parent_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace dumpd
