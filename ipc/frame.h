// Wire framing on the stream socket: a 4-byte little-endian length N (N <= 16 MiB), then N
// bytes of one serialized dumpd.v1.Envelope.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "proto/dumpd.pb.h"

namespace dumpd::ipc {

inline constexpr uint32_t kMaxFrameBytes = 16u << 20;
inline constexpr uint32_t kProtocolMajor = 2;  // 2: futex wake-ups in the ring, 2 fds
inline constexpr uint32_t kProtocolMinor = 0;

// Serializes `env` with its length prefix. Errors when it exceeds max_frame_bytes.
Result<std::string> encodeFrame(const v1::Envelope& env, uint32_t max_frame_bytes = kMaxFrameBytes);

// Incremental decoder: feed bytes as they arrive, take whole envelopes out.
// Thread-compatible. After an error the decoder stays failed (the connection must close).
class FrameDecoder {
 public:
  explicit FrameDecoder(uint32_t max_frame_bytes = kMaxFrameBytes) : max_(max_frame_bytes) {}

  void append(const void* data, size_t n);
  // The next complete envelope, nullopt when more bytes are needed, or an error for an
  // oversized length or bytes that do not parse as an Envelope.
  Result<std::optional<v1::Envelope>> next();
  // Bytes received but not yet consumed (a partial frame at EOF means a truncated frame).
  size_t buffered() const { return buf_.size() - pos_; }
  // Lowers (or raises) the frame limit for frames not yet started; the daemon allows small
  // frames only once a session is open.
  void setMaxFrameBytes(uint32_t max_frame_bytes) { max_ = max_frame_bytes; }
  // Returns the buffer's memory when nothing is buffered (after a large Hello).
  void shrinkToFit() {
    if (buffered() == 0) {
      std::string().swap(buf_);
      pos_ = 0;
    }
  }

 private:
  uint32_t max_;
  std::string buf_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace dumpd::ipc
