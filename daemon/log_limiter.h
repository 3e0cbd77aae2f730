// Rate limit for log lines a client can cause: at most `burst` lines per `window`; the rest
// are counted, and the count is reported with the first line of a later window (or by
// takeSuppressed()). One misbehaving or hostile client must not flood the shared journal.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>

#include "base/mutex.h"

namespace dumpd::daemon {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  LogLimiter(int burst, Clock::duration window) : burst_(burst), window_(window) {}

  struct Admission {
    bool log = false;         // write this line
    uint64_t suppressed = 0;  // lines dropped in earlier windows: report them first
  };
  Admission admit(Clock::time_point now = Clock::now());
  // Lines dropped and not yet reported (resets the count).
  uint64_t takeSuppressed();

 private:
  const int burst_;
  const Clock::duration window_;
  Mutex mu_;
  Clock::time_point window_start_ GUARDED_BY(mu_){};
  int count_ GUARDED_BY(mu_) = 0;
  uint64_t suppressed_ GUARDED_BY(mu_) = 0;
};

}  // namespace dumpd::daemon
