// `dumpctl validate FILE`: checks a job config exactly as the daemon will.
#pragma once

#include <ostream>
#include <string>

namespace dumpd::dumpctl {

// Loads and validates the job config at `file` with this process's environment (so the
// MS_DIAGNOSTIC_DATA_PATH fallback applies as it will for the job).
// Valid: writes summarizePlan() and a newline to `out`, each forced value as a
// "dumpctl: warning: ..." line to `err`, and returns 0.
// Invalid or unreadable: writes "dumpctl: FILE: <message>" to `err` and returns 1.
int runValidateCommand(const std::string& file, std::ostream& out, std::ostream& err);

}  // namespace dumpd::dumpctl
