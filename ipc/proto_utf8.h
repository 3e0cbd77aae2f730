// Why a dumpd.v1 message did not parse, when the reason is text: protobuf `string` fields
// must hold UTF-8, and a message whose string field holds other bytes fails to parse as a
// whole, without saying which field. This walks the wire bytes and names the first such
// field, so that the error says what to fix. The messages are built LITE (no descriptors):
// the string fields of what clients send are listed in proto_utf8.cc, beside the schema's
// field numbers, and tests/ipc/frame_test.cc checks each against the generated code.
#pragma once

#include <string>
#include <string_view>

namespace dumpd::ipc {

// What `bytes` are read as.
enum class WireMessage { kEnvelope, kControl };

// The full name of the first `string` field (at any depth) of `bytes` whose value is not
// valid UTF-8 ("dumpd.v1.Trigger.reason"); empty when there is none or the bytes are not a
// well-formed message at all.
std::string invalidUtf8Field(WireMessage type, std::string_view bytes);

}  // namespace dumpd::ipc
