// A small value-or-error type used across component boundaries.
//
// g++ 12 has no std::expected in C++20 mode; Result keeps its member names (has_value, value,
// error) so the switch is one line later. Errors carry a machine-readable code and a message
// meant for humans: the message names what was wrong ("net_name only supports ...").
#pragma once

#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <variant>

namespace dumpd {

enum class ErrorCode {
  kInvalidArgument,  // bad input from a user or a client (frame, name, argument)
  kInvalidConfig,    // a job config or settings file failed validation
  kNotFound,
  kIo,           // EIO and other I/O failures
  kNoSpace,      // ENOSPC, quota or free-space watermark
  kPermission,   // EACCES / EPERM
  kProtocol,     // malformed or unexpected message
  kUnavailable,  // no daemon, peer went away
  kTimeout,
  kResourceExhausted,  // limits: sessions, ring size, frame size
  kUnsupported,        // not available here (a hard link the file system refuses)
  kInternal,
};

const char* errorCodeName(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};

inline Error makeError(ErrorCode code, std::string message) {
  return Error{code, std::move(message)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  // REQUIRES: has_value().
  T& value() & {
    check();
    return std::get<0>(v_);
  }
  const T& value() const& {
    check();
    return std::get<0>(v_);
  }
  T&& value() && {
    check();
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // REQUIRES: !has_value().
  const Error& error() const { return std::get<1>(v_); }

 private:
  void check() const {
    if (!has_value()) {
      std::cerr << "dumpd: Result::value() on an error: " << std::get<1>(v_).message << "\n";
      std::abort();
    }
  }
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

inline const char* errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kInvalidConfig:
      return "invalid_config";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kIo:
      return "io_error";
    case ErrorCode::kNoSpace:
      return "no_space";
    case ErrorCode::kPermission:
      return "permission_denied";
    case ErrorCode::kProtocol:
      return "protocol_error";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kResourceExhausted:
      return "resource_exhausted";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

}  // namespace dumpd
