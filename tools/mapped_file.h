// A whole file mapped read-only (mmap), for the offline tools (convert, compare). An empty file
// maps to an empty span (mmap refuses length 0).
//
// A file that shrinks while mapped (truncated by someone else) would kill the process with
// SIGBUS on the first read past its new end. Every mapping is registered with a process-wide
// SIGBUS handler instead: a fault inside a registered mapping maps zero pages over the rest of
// it and marks it shrunk, and the read goes on. Readers check shrank() once they are done and
// report the file. A fault anywhere else keeps its old disposition. At most kGuardedMappings
// mappings are guarded at once; beyond that a mapping is unguarded (a crash, as before).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace dumpd::tools {

// Opens a file of a dump tree for reading, as root's dumpctl may do in a tree another user
// owns: the last component is never followed if it is a symbolic link (O_NOFOLLOW), a FIFO
// or device never blocks the open (O_NONBLOCK), and the type is checked on the descriptor
// opened, not on the path, so a swap after the tree was scanned cannot make dumpctl read
// another file or hang. Errors name the path: kNotFound, kPermission, kIo, and
// kInvalidArgument for a link or anything but a regular file. `size` gets the file's size.
// `follow_link`: a file the user named on the command line (not found in a tree) may be a
// link; it still never blocks and must be a regular file.
Result<UniqueFd> openRegularFile(const std::string& path, uint64_t* size = nullptr,
                                 bool follow_link = false);

class MappedFile {
 public:
  // Opens and maps `path`. Errors name the path (kNotFound, kPermission, kIo); a directory or
  // other non-regular file is kInvalidArgument.
  static Result<MappedFile> open(const std::string& path);
  // Maps `size` bytes of `fd`, a regular file opened by openRegularFile (named `path`).
  static Result<MappedFile> map(int fd, size_t size, const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // madvise(MADV_SEQUENTIAL | WILLNEED): the caller reads it front to back.
  void adviseSequential() const;
  // True once a read hit a page past the file's end: what was read there was zeros, not the
  // file. Check after reading.
  bool shrank() const;

  static constexpr size_t kGuardedMappings = 1024;

 private:
  void release();

  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  int guard_ = -1;  // slot in the SIGBUS guard table; -1: unguarded
  std::string path_;
};

}  // namespace dumpd::tools
