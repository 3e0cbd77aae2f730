// Client-provided text (op and net names, paths, producer names, error messages that quote
// them) on its way into the daemon's log: control characters, backslashes and non-ASCII bytes
// become \xNN escapes, so a client can neither forge log lines nor send terminal escapes, and
// the text is cut to a bounded length.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dumpd::daemon {

inline constexpr size_t kMaxLoggedBytes = 512;

std::string escapeForLog(std::string_view text, size_t max_bytes = kMaxLoggedBytes);

}  // namespace dumpd::daemon
