// A FileSystem wrapper that makes chosen calls fail, for tests of every error path.
//
// Every call that can fail (see FsOp) is numbered from 0 in the order it is made; failCall(n)
// fails call n, failEvery(op) fails every call of a kind. A failed call does nothing (a
// failing commit removes the temporary file, as a real failing rename does) and returns the
// error of the chosen code (kNoSpace -> ENOSPC, kIo -> EIO, kPermission -> EACCES,
// kUnsupported -> EMLINK: a refused hard link) whose
// message names the file and ends in "(injected)".
//
// Thread-safety: everything may be called from any thread.
#pragma once

#include <memory>

#include "storage/fs/file_system.h"

namespace dumpd::storage {

class FaultInjectingFileSystem final : public FileSystem {
 public:
  explicit FaultInjectingFileSystem(std::shared_ptr<FileSystem> base);
  ~FaultInjectingFileSystem() override;

  Result<std::shared_ptr<Directory>> openDirectory(std::string_view path,
                                                   DirectoryOptions options) override;
  Result<uint64_t> freeBytes() override;
  const Credentials* credentials() const override;

  // Fails the call with this index (0-based, counted over all kinds).
  void failCall(uint64_t index, ErrorCode code = ErrorCode::kNoSpace);
  // Fails every later call of kind `op`.
  void failEvery(FsOp op, ErrorCode code = ErrorCode::kNoSpace);
  void clearFaults();

  uint64_t calls() const;         // calls made so far (all kinds)
  uint64_t calls(FsOp op) const;  // calls of one kind so far
  uint64_t faultsInjected() const;

  struct State;

 private:
  std::shared_ptr<FileSystem> base_;
  std::shared_ptr<State> state_;
};

}  // namespace dumpd::storage
