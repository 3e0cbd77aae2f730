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
// the argument; an unknown option is named with the nearest of the selector's options and
// `command_options` (the command's own, for the suggestion).
Result<v1::SessionSelector> parseSessionSelector(
    const std::vector<std::string_view>& args,
    const std::vector<std::string_view>& command_options = {});

// The option of `known` nearest to `given` (a typo, a plural, a missing dash), or empty when
// none is close.
std::string_view nearestOption(std::string_view given, const std::vector<std::string_view>& known);

// Sends `command`, prints the daemon's answer on `out`. Exit codes: 0 done, 1 refused or no
// daemon (the reason on `err`, prefixed "dumpctl NAME: ").
int sendSessionCommand(const std::string& socket, const v1::SessionCommand& command,
                       std::string_view name, std::ostream& out, std::ostream& err);

}  // namespace dumpd::dumpctl
