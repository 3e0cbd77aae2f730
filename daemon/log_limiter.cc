#include "daemon/log_limiter.h"

#include <utility>

namespace dumpd::daemon {

LogLimiter::Admission LogLimiter::admit(Clock::time_point now) {
  MutexLock lock(&mu_);
  Admission a;
  if (now - window_start_ >= window_) {
    a.suppressed = std::exchange(suppressed_, 0);
    count_ = 0;
    window_start_ = now;
  }
  if (count_ < burst_) {
    ++count_;
    a.log = true;
  } else {
    ++suppressed_;
  }
  return a;
}

uint64_t LogLimiter::takeSuppressed() {
  MutexLock lock(&mu_);
  return std::exchange(suppressed_, 0);
}

}  // namespace dumpd::daemon
