// Text from outside (a config, a client, a file name) made safe to put in a message.
#pragma once

#include <string>
#include <string_view>

namespace dumpd {

// `s` with control bytes (< 0x20, 0x7f) written as \xNN, so an error message never carries a
// raw newline or escape sequence to a terminal or a log.
std::string printable(std::string_view s);

}  // namespace dumpd
