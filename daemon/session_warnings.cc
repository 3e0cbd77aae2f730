#include "daemon/session_warnings.h"

#include <spdlog/spdlog.h>

#include "base/utf8.h"
#include "daemon/log_escape.h"

namespace dumpd::daemon {

void SessionWarnings::note(const std::string& message) {
  // Bounded: an error message may quote client-sized text, of any bytes (status sends it in
  // a protobuf string: valid UTF-8, cut between characters).
  last_error_.store(std::make_shared<const std::string>(toValidUtf8(cutUtf8(message, 1024))));
}

std::shared_ptr<const std::string> SessionWarnings::lastError() const { return last_error_.load(); }

void SessionWarnings::warn(const std::string& message) {
  note(message);
  const LogLimiter::Admission a = limiter_.admit();
  if (a.suppressed != 0) {
    spdlog::warn("session {}: {} similar warning(s) suppressed", id_, a.suppressed);
  }
  if (a.log) spdlog::warn("session {}: {}", id_, escapeForLog(message));
}

void SessionWarnings::flushSuppressed() {
  if (const uint64_t suppressed = limiter_.takeSuppressed(); suppressed != 0) {
    spdlog::warn("session {}: {} similar warning(s) suppressed", id_, suppressed);
  }
}

}  // namespace dumpd::daemon
