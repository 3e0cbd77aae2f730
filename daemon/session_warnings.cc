#include "daemon/session_warnings.h"

#include <spdlog/spdlog.h>

#include "daemon/log_escape.h"

namespace dumpd::daemon {

void SessionWarnings::note(const std::string& message) {
  // Bounded: an error message may quote client-sized text.
  last_error_.store(std::make_shared<const std::string>(message.substr(0, 1024)));
}

std::shared_ptr<const std::string> SessionWarnings::lastError() const { return last_error_.load(); }

void SessionWarnings::warn(const std::string& message) {
  note(message);
  uint64_t suppressed = 0;
  bool log = false;
  {
    MutexLock lock(&mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= kWindow) {
      suppressed = suppressed_;
      suppressed_ = 0;
      count_ = 0;
      window_start_ = now;
    }
    if (count_ < kBurst) {
      ++count_;
      log = true;
    } else {
      ++suppressed_;
    }
  }
  if (suppressed != 0)
    spdlog::warn("session {}: {} similar warning(s) suppressed", id_, suppressed);
  if (log) spdlog::warn("session {}: {}", id_, escapeForLog(message));
}

void SessionWarnings::flushSuppressed() {
  uint64_t suppressed;
  {
    MutexLock lock(&mu_);
    suppressed = std::exchange(suppressed_, 0);
  }
  if (suppressed != 0)
    spdlog::warn("session {}: {} similar warning(s) suppressed", id_, suppressed);
}

}  // namespace dumpd::daemon
