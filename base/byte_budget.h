// A budget of bytes shared by many users (sessions, jobs): charges succeed while the total stays
// within the limit. Lock-free; a refused charge leaves nothing charged.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace dumpd {

class ByteBudget {
 public:
  // `limit` 0: unlimited (charges always succeed, and are still counted).
  explicit ByteBudget(uint64_t limit) : limit_(limit) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Charges `bytes` when the total stays within the limit; false (nothing charged) otherwise.
  bool tryCharge(uint64_t bytes) {
    uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (limit_ != 0 && (bytes > limit_ || used > limit_ - bytes)) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }
  // Gives back bytes charged before.
  void release(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace dumpd
