// `dumpctl trigger`: a manual flight recorder trigger on a live session (docs/recorder.md).
#pragma once

#include <optional>
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

// args: the selector and [--reason TEXT]. Exit codes: 0 triggered, 1 refused or no daemon
// (the daemon's reason on `err`), 2 usage.
int runTriggerCommand(const std::vector<std::string_view>& args, const std::string& socket,
                      std::ostream& out, std::ostream& err);

}  // namespace dumpd::dumpctl
