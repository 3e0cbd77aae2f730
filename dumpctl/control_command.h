// `dumpctl control`: change what a running job dumps, from its next step (docs/recorder.md).
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "dumpctl/session_request.h"

namespace dumpd::dumpctl {

// args: the session (SESSION | --pid PID | --rank N --job NET_NAME) and at least one of
// --iteration RANGE, --pause, --resume, --recorder on|off. A malformed RANGE is refused here
// with the error `dumpctl validate` gives. Exit codes: 0 changed, 1 refused or no daemon,
// 2 usage.
int runControlCommand(const std::vector<std::string_view>& args, const std::string& socket,
                      std::ostream& out, std::ostream& err);

}  // namespace dumpd::dumpctl
