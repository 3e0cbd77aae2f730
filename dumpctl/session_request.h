// What dumpctl's session commands (trigger, control) share: naming a live session, and one
// SessionCommand round trip over the daemon's socket.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "proto/dumpd.pb.h"

namespace dumpd::dumpctl {

// SESSION | --pid PID | --rank N --job NET_NAME: the session a command acts on. Errors name
// the argument.
Result<v1::SessionSelector> parseSessionSelector(const std::vector<std::string_view>& args);

// Sends `command`, prints the daemon's answer on `out`. Exit codes: 0 done, 1 refused or no
// daemon (the reason on `err`, prefixed "dumpctl NAME: ").
int sendSessionCommand(const std::string& socket, const v1::SessionCommand& command,
                       std::string_view name, std::ostream& out, std::ostream& err);

}  // namespace dumpd::dumpctl
