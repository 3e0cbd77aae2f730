// A whole file mapped read-only (mmap), for the offline tools (convert, compare). An empty file
// maps to an empty span (mmap refuses length 0).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "base/result.h"

namespace dumpd::tools {

class MappedFile {
 public:
  // Opens and maps `path`. Errors name the path (kNotFound, kPermission, kIo); a directory or
  // other non-regular file is kInvalidArgument.
  static Result<MappedFile> open(const std::string& path);

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

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace dumpd::tools
