#include "ipc/frame.h"

#include <cstring>

#include "ipc/proto_utf8.h"

namespace dumpd::ipc {

Result<std::string> encodeFrame(const v1::Envelope& env, uint32_t max_frame_bytes) {
  const size_t n = env.ByteSizeLong();
  if (n > max_frame_bytes) {
    return makeError(ErrorCode::kResourceExhausted, "message of " + std::to_string(n) +
                                                        " bytes exceeds the frame limit of " +
                                                        std::to_string(max_frame_bytes));
  }
  std::string out(4 + n, '\0');
  const uint32_t len = static_cast<uint32_t>(n);
  const unsigned char prefix[4] = {
      static_cast<unsigned char>(len), static_cast<unsigned char>(len >> 8),
      static_cast<unsigned char>(len >> 16), static_cast<unsigned char>(len >> 24)};
  std::memcpy(out.data(), prefix, 4);
  if (!env.SerializeToArray(out.data() + 4, static_cast<int>(n))) {
    return makeError(ErrorCode::kInternal, "cannot serialize message");
  }
  return out;
}

void FrameDecoder::append(const void* data, size_t n) {
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  buf_.append(static_cast<const char*>(data), n);
}

Result<std::optional<v1::Envelope>> FrameDecoder::next() {
  if (failed_) return makeError(ErrorCode::kProtocol, "frame stream already failed");
  if (buf_.size() - pos_ < 4) return std::optional<v1::Envelope>{};
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
  const uint32_t len =
      uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  if (len > max_) {
    failed_ = true;
    return makeError(ErrorCode::kProtocol, "frame length " + std::to_string(len) +
                                               " exceeds the limit of " + std::to_string(max_));
  }
  if (buf_.size() - pos_ - 4 < len) return std::optional<v1::Envelope>{};
  v1::Envelope env;
  if (!env.ParseFromArray(buf_.data() + pos_ + 4, static_cast<int>(len))) {
    failed_ = true;
    const std::string field =
        invalidUtf8Field(WireMessage::kEnvelope, std::string_view(buf_.data() + pos_ + 4, len));
    if (!field.empty()) {
      return makeError(ErrorCode::kProtocol, "frame of " + std::to_string(len) +
                                                 " bytes: its string field " + field +
                                                 " is not valid UTF-8 (protobuf strings must be)");
    }
    return makeError(ErrorCode::kProtocol,
                     "frame of " + std::to_string(len) + " bytes is not a dumpd.v1 message");
  }
  pos_ += 4 + len;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  return std::optional<v1::Envelope>(std::move(env));
}

}  // namespace dumpd::ipc
