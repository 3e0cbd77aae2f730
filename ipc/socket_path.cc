#include "ipc/socket_path.h"

#include <cstdlib>

namespace dumpd::ipc {

std::string resolveSocketPath(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  if (const char* env = std::getenv("DUMPD_SOCKET"); env != nullptr && *env != '\0') return env;
  return kDefaultSocketPath;
}

}  // namespace dumpd::ipc
