#include "ipc/control_codec.h"

#include <climits>
#include <cstring>

#include "ipc/ring_format.h"

namespace dumpd::ipc {

uint64_t controlPayloadOffset(uint64_t message_bytes) { return alignUp(8 + message_bytes, 8); }

uint64_t controlBodyBytes(uint64_t message_bytes, uint64_t payload_bytes) {
  return controlPayloadOffset(message_bytes) + payload_bytes;
}

namespace {

// The length word and the reserved word; returns where the message goes.
std::byte* writePrefix(std::byte* body, uint64_t message_bytes) {
  const uint32_t len = static_cast<uint32_t>(message_bytes);
  std::memcpy(body, &len, 4);
  std::memset(body + 4, 0, 4);
  return body + 8;
}

}  // namespace

std::byte* writeControl(std::byte* body, const v1::Control& ctl, uint64_t message_bytes) {
  ctl.SerializeToArray(writePrefix(body, message_bytes), static_cast<int>(message_bytes));
  return body + controlPayloadOffset(message_bytes);
}

std::byte* writeControl(std::byte* body, std::string_view serialized) {
  std::memcpy(writePrefix(body, serialized.size()), serialized.data(), serialized.size());
  return body + controlPayloadOffset(serialized.size());
}

Result<ControlView> readControl(std::span<const std::byte> body) {
  if (body.size() < 8)
    return makeError(ErrorCode::kProtocol, "control record shorter than 8 bytes");
  uint32_t len = 0;
  std::memcpy(&len, body.data(), 4);
  if (len > body.size() - 8) {
    return makeError(ErrorCode::kProtocol, "control message runs past its record");
  }
  if (len > static_cast<uint32_t>(INT32_MAX)) {
    return makeError(ErrorCode::kProtocol, "control message larger than 2 GiB");
  }
  ControlView v;
  v.message = std::string_view(reinterpret_cast<const char*>(body.data()) + 8, len);
  const uint64_t payload = controlPayloadOffset(len);
  if (payload <= body.size()) v.payload = body.subspan(payload);
  return v;
}

}  // namespace dumpd::ipc
