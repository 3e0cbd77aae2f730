// Control records (RecordKind::kControl): a dumpd.v1.Control message and an optional payload
// in one ring record. The client writes them and the daemon reads them; both use this codec,
// as op records use op_codec.h. The body, right after the RecordHeader:
//
//   [0, 4)               u32 length L of the serialized dumpd.v1.Control (little-endian)
//   [4, 8)               reserved, zero
//   [8, 8 + L)           the message
//   [P, body_bytes)      the payload (a constant's bytes), P = alignUp(8 + L, 8); may be empty
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/result.h"
#include "proto/dumpd.pb.h"

namespace dumpd::ipc {

// Where the payload of a message of `message_bytes` starts, from the body's start.
uint64_t controlPayloadOffset(uint64_t message_bytes);
// The body a message of `message_bytes` and a payload of `payload_bytes` take.
uint64_t controlBodyBytes(uint64_t message_bytes, uint64_t payload_bytes);

// Writes the length word, the reserved word and `ctl` (serialized: `message_bytes`, its
// ByteSizeLong()) at `body`, which holds controlBodyBytes(message_bytes, payload_bytes)
// bytes. Returns where the payload goes. REQUIRES: message_bytes <= INT32_MAX.
std::byte* writeControl(std::byte* body, const v1::Control& ctl, uint64_t message_bytes);
// The same for a message serialized already (e.g. deterministically, for a fixed corpus).
std::byte* writeControl(std::byte* body, std::string_view serialized);

// A control record's body as read: the serialized message and what follows it.
struct ControlView {
  std::string_view message;
  // From the payload offset to the body's end (empty when they meet); nullopt when the body
  // ends before the payload offset (a record with no room for any payload).
  std::optional<std::span<const std::byte>> payload;
};

// kProtocol naming what is wrong: a body shorter than its 8-byte prefix, a message running
// past the record, or one larger than 2 GiB (protobuf's limit).
Result<ControlView> readControl(std::span<const std::byte> body);

}  // namespace dumpd::ipc
