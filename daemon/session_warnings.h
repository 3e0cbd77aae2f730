// A session's warnings: rate-limited log lines (a misbehaving client or a full disk cannot
// flood the journal) and the last error, published for status and flush replies.
//
// Thread-safety: every method may be called from any thread (the rate is a LogLimiter; the
// last error is a Snapshot, a lock held only for a pointer copy).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/snapshot.h"
#include "daemon/log_limiter.h"

namespace dumpd::daemon {

class SessionWarnings {
 public:
  explicit SessionWarnings(uint64_t session_id) : id_(session_id) {}

  // Records `message` as the last error and logs it (escaped), at most kBurst lines per
  // kWindow; the rest are counted and summarised.
  void warn(const std::string& message);
  // Records the last error without logging.
  void note(const std::string& message);
  // Logs the summary of suppressed lines, if any (session end).
  void flushSuppressed();
  std::shared_ptr<const std::string> lastError() const;

 private:
  static constexpr int kBurst = 5;
  static constexpr std::chrono::seconds kWindow{10};
  const uint64_t id_;
  Snapshot<std::string> last_error_;
  LogLimiter limiter_{kBurst, kWindow};
};

}  // namespace dumpd::daemon
