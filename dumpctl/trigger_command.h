// `dumpctl trigger`: a manual flight recorder trigger on a live session (docs/recorder.md).
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "dumpctl/session_request.h"

namespace dumpd::dumpctl {

// args: the session (SESSION | --pid PID | --rank N --job NET_NAME) and [--reason TEXT].
// Exit codes: 0 triggered, 1 refused or no daemon (the daemon's reason on `err`), 2 usage.
int runTriggerCommand(const std::vector<std::string_view>& args, const std::string& socket,
                      std::ostream& out, std::ostream& err);

}  // namespace dumpd::dumpctl
