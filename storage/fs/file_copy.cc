#include "storage/fs/file_copy.h"

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <memory>

namespace dumpd::storage {
namespace {

// Errors that mean "this pair of descriptors cannot be copied in the kernel", not a failure.
bool kernelCopyUnsupported(int err) {
  return err == EXDEV || err == ENOSYS || err == EINVAL || err == EOPNOTSUPP;
}

// Copies the rest of `in` through a buffer; adds to `done`.
CopyOutcome copyThroughBuffer(int in, int out, CopyOutcome done) {
  constexpr size_t kBufferSize = size_t{1} << 17;
  auto buffer = std::make_unique<char[]>(kBufferSize);
  while (true) {
    ssize_t n = ::read(in, buffer.get(), kBufferSize);
    if (n < 0) {
      if (errno == EINTR) continue;
      done.error = errno;
      return done;
    }
    if (n == 0) return done;
    const char* p = buffer.get();
    size_t left = static_cast<size_t>(n);
    while (left > 0) {
      ssize_t w = ::write(out, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        done.error = errno;
        return done;
      }
      p += w;
      left -= static_cast<size_t>(w);
      done.bytes += static_cast<uint64_t>(w);
    }
  }
}

}  // namespace

CopyOutcome copyFileData(int in, int out) {
  // At most 1 GiB a call: the kernel caps a call below 2 GiB anyway, and a smaller step keeps
  // each call short.
  constexpr size_t kStep = size_t{1} << 30;
  CopyOutcome done;
  while (true) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, kStep, 0);
    if (n > 0) {
      done.bytes += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) return done;
    if (errno == EINTR) continue;
    // Both offsets stand after what was copied so far: the buffer goes on from there.
    if (kernelCopyUnsupported(errno)) return copyThroughBuffer(in, out, done);
    done.error = errno;
    return done;
  }
}

}  // namespace dumpd::storage
