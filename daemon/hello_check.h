// The first, cheap check of a Hello, run on the io thread before anything is allocated for
// the session: protocol version, descriptor count, and bounded field sizes. Everything that
// costs time in proportion to what the client sent (parsing the job config, compiling its
// regular expressions, mapping the ring, opening directories) runs later, off the io thread
// (daemon/session_setup.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "base/result.h"
#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

// Descriptors a Hello carries, in order.
inline constexpr size_t kHelloRingFd = 0;
inline constexpr size_t kHelloRootFd = 1;
inline constexpr size_t kHelloFdCount = 2;

// Size limits of Hello fields (bytes).
inline constexpr size_t kMaxJobConfigBytes = 4u << 20;
inline constexpr size_t kMaxProducerBytes = 256;
inline constexpr size_t kMaxPathBytes = 4096;

struct HelloError {
  v1::Error::Code code;
  std::string message;
};

// Empty when the Hello may proceed to session set-up; otherwise the error to send back.
std::optional<HelloError> checkHello(const v1::Hello& hello, size_t fd_count);

}  // namespace dumpd::daemon
