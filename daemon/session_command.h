// dumpctl's commands on a live session (dumpctl trigger): which session a SessionSelector
// names, whether the caller may act on it, and the action. Runs on the io thread; an action
// only posts to the session (DumpSession::requestTrigger), it never waits for it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/dump_session.h"
#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

struct CommandOutcome {
  bool ok = false;
  v1::Error::Code code = v1::Error::UNKNOWN;  // when !ok
  std::string message;                        // the reply's, or the error's
  uint64_t session_id = 0;
};

// Only the session's own uid or root may act on it: other users' sessions are invisible to a
// caller (they neither match nor make a name ambiguous); a name that only they match is
// refused as PERMISSION_DENIED and logged.
CommandOutcome runSessionCommand(const std::vector<std::shared_ptr<DumpSession>>& live,
                                 const PeerIdentity& requester, const v1::SessionCommand& cmd);

}  // namespace dumpd::daemon
