#include "daemon/session_command.h"

#include <spdlog/spdlog.h>

#include "base/utf8.h"
#include "daemon/log_escape.h"
#include "daemon/log_limiter.h"

namespace dumpd::daemon {
namespace {

CommandOutcome refuse(v1::Error::Code code, std::string message) {
  CommandOutcome o;
  o.code = code;
  o.message = std::move(message);
  return o;
}

std::string describe(const v1::SessionSelector& s) {
  if (s.session_id() != 0) return "session " + std::to_string(s.session_id());
  if (s.pid() != 0) return "session of pid " + std::to_string(s.pid());
  return "session of rank " + std::to_string(s.rank()) + " of job " + s.net_name();
}

bool matches(const DumpSession& session, const v1::SessionSelector& s) {
  if (s.session_id() != 0) return session.id() == s.session_id();
  if (s.pid() != 0) return session.peer().pid == s.pid();
  return session.rank() == s.rank() && session.netName() == s.net_name();
}

}  // namespace

CommandOutcome runSessionCommand(const std::vector<std::shared_ptr<DumpSession>>& live,
                                 const PeerIdentity& requester, const v1::SessionCommand& cmd) {
  const v1::SessionSelector& sel = cmd.target();
  const int ways = (sel.session_id() != 0) + (sel.pid() != 0) + sel.by_rank();
  if (ways != 1) {
    return refuse(v1::Error::PROTOCOL,
                  "name the session one way: its id, --pid, or --rank with --job");
  }
  // A user sees only their own sessions (as in status): another user's session neither
  // matches nor makes a name ambiguous. Root sees all.
  std::vector<std::shared_ptr<DumpSession>> found;
  size_t others = 0;
  for (const auto& s : live) {
    if (!matches(*s, sel)) continue;
    if (requester.uid == 0 || s->peer().uid == requester.uid) {
      found.push_back(s);
    } else {
      ++others;
    }
  }
  if (found.empty() && others != 0) {
    // Rate-limited: any local user may send these as fast as they like.
    static LogLimiter refusals(5, std::chrono::seconds(10));
    const LogLimiter::Admission a = refusals.admit();
    if (a.suppressed != 0) {
      spdlog::warn("{} similar refused command(s) not logged", a.suppressed);
    }
    if (a.log) {
      spdlog::warn("refused a command from uid {} (pid {}) on {} of another user", requester.uid,
                   requester.pid, describe(sel));
    }
    return refuse(v1::Error::PERMISSION_DENIED,
                  "the " + describe(sel) + " is not yours (uid " + std::to_string(requester.uid) +
                      "); only the session's own uid or root may control it");
  }
  if (found.empty()) return refuse(v1::Error::NOT_FOUND, "no live " + describe(sel));
  if (found.size() > 1) {
    return refuse(v1::Error::NOT_FOUND, "the " + describe(sel) +
                                            " is ambiguous: " + std::to_string(found.size()) +
                                            " live sessions match; name it by id");
  }
  DumpSession& session = *found.front();
  CommandOutcome o;
  o.session_id = session.id();
  switch (cmd.action_case()) {
    case v1::SessionCommand::kTrigger: {
      if (std::string why = session.triggerRefusal(); !why.empty()) {
        return refuse(v1::Error::FAILED_PRECONDITION, why);
      }
      std::string reason(cutUtf8(cmd.trigger().reason(), 1024));
      session.logCommand("manual trigger from uid " + std::to_string(requester.uid) + ": " +
                         escapeForLog(reason));
      session.requestTrigger(std::move(reason));
      o.ok = true;
      o.message = "triggered session " + std::to_string(session.id()) +
                  ": its kept iterations are being written";
      return o;
    }
    case v1::SessionCommand::kControl: {
      auto done = session.control(cmd.control(), requester.uid);
      if (!done) {
        const ErrorCode c = done.error().code;
        return refuse(c == ErrorCode::kInvalidConfig     ? v1::Error::INVALID_CONFIG
                      : c == ErrorCode::kInvalidArgument ? v1::Error::PROTOCOL
                                                         : v1::Error::FAILED_PRECONDITION,
                      done.error().message);
      }
      o.ok = true;
      o.message = std::move(done).value();
      return o;
    }
    case v1::SessionCommand::ACTION_NOT_SET:
      break;
  }
  return refuse(v1::Error::PROTOCOL, "session command without an action");
}

}  // namespace dumpd::daemon
