// Opening a dump file to read it back (the npy header and LZ4 frame readers): one error
// wording, kNotFound for a missing file.
#pragma once

#include <errno.h>
#include <fcntl.h>

#include <cstring>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace dumpd::storage {

inline Result<UniqueFd> openForReading(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) {
    return makeError(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                     "cannot open " + path + ": " + std::strerror(errno));
  }
  return fd;
}

}  // namespace dumpd::storage
