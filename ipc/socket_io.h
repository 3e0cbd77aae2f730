// Blocking Unix-socket helpers for clients (dumpctl, the client library) and the recvmsg
// wrapper the daemon uses to collect SCM_RIGHTS descriptors.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "ipc/frame.h"

namespace dumpd::ipc {

inline constexpr size_t kMaxFdsPerMessage = 8;

// Connects a SOCK_STREAM Unix socket; errors name the path ("no dumpd listening on ...").
Result<UniqueFd> connectUnix(const std::string& path);

// Sends one framed envelope; `fds` ride along with its first byte (SCM_RIGHTS).
Status sendFrame(int sock, const v1::Envelope& env, std::span<const int> fds = {});

// Reads until one envelope is complete (blocking, `timeout_ms` per wait, -1 forever).
Result<v1::Envelope> recvFrame(int sock, FrameDecoder& decoder, int timeout_ms = -1);

// One recvmsg: appends bytes to `decoder`, received fds to `fds` (owned). Returns bytes read
// (0 = peer closed), or -errno (-EAGAIN when nothing is ready on a non-blocking socket).
ssize_t recvWithFds(int sock, FrameDecoder& decoder, std::vector<UniqueFd>& fds);

}  // namespace dumpd::ipc
