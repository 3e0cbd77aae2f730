// UTF-8 for text that leaves dumpd in a protobuf `string` field or a JSON journal: text from
// clients (op names, reasons, paths) may hold any bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dumpd {

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF).
bool isValidUtf8(std::string_view s);
// `s` with every byte that is not part of a well-formed sequence replaced by U+FFFD.
std::string toValidUtf8(std::string_view s);
// The longest prefix of `s` of at most `max_bytes` that does not end inside a multi-byte
// character (a cut of valid UTF-8 stays valid).
std::string_view cutUtf8(std::string_view s, size_t max_bytes);
// Text for a protobuf `string` field from whatever bytes a user passed: invalid bytes
// replaced by U+FFFD, then cut between characters to at most `max_bytes`.
std::string toWireText(std::string_view s, size_t max_bytes = SIZE_MAX);

}  // namespace dumpd
