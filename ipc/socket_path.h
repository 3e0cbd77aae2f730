// Where the daemon's socket is: the one rule the daemon, dumpctl and every client share.
#pragma once

#include <cstddef>
#include <string>

namespace dumpd::ipc {

inline constexpr const char* kDefaultSocketPath = "/run/dumpd/dumpd.sock";
inline constexpr size_t kMaxSocketPathBytes = 107;  // sockaddr_un::sun_path less its NUL

// The socket path to use: `explicit_path` when not empty, else $DUMPD_SOCKET when set and not
// empty, else kDefaultSocketPath.
std::string resolveSocketPath(const std::string& explicit_path);

}  // namespace dumpd::ipc
