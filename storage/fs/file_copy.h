// Copying a file's bytes between two open descriptors (linkFile's fallback where the file
// system refuses a hard link).
#pragma once

#include <cstdint>

namespace dumpd::storage {

struct CopyOutcome {
  uint64_t bytes = 0;  // copied before the end of `in`, or before the error
  int error = 0;       // errno of the failed read or write; 0: copied to the end of `in`
};

// Copies from `in` at its file offset to its end, to `out` at its file offset: in the kernel
// (copy_file_range, which may share extents) where it can, else through a buffer (when
// copy_file_range answers EXDEV, ENOSYS, EINVAL or EOPNOTSUPP: old kernels, pipes, file
// systems without it). Both offsets advance by what was copied.
CopyOutcome copyFileData(int in, int out);

}  // namespace dumpd::storage
