// An in-memory FileSystem for tests: same contract as the POSIX one, plus inspection, a
// capacity (ENOSPC when full), planted symlinks, and a crash model.
//
// Crash model: file contents become durable at sync of the file, directory entries (created,
// renamed, removed) at sync of their directory. simulateCrash() throws away everything not
// durable, as a power cut would.
//
// No hard links: linkFile checks its arguments as the POSIX one does and then answers
// kUnsupported, as a file system without links would. copyFile makes a node of its own: the
// new file has the given mode, bytesWritten() is its size, it counts against the capacity,
// and, like any new file, its contents are durable only after its sync().
//
// Thread-safety: everything may be called from any thread (one mutex guards the tree).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "storage/fs/file_system.h"

namespace dumpd::storage {

class MemoryFileSystem final : public FileSystem {
 public:
  struct Entry {
    enum class Kind { kDirectory, kFile, kSymlink };
    std::string path;
    Kind kind = Kind::kFile;
    uint32_t mode = 0;
    std::string data;  // file contents or symlink target
  };

  MemoryFileSystem();
  ~MemoryFileSystem() override;

  Result<std::shared_ptr<Directory>> openDirectory(std::string_view path,
                                                   DirectoryOptions options) override;
  Result<uint64_t> freeBytes() override;

  // Every entry beneath the root, sorted by path.
  std::vector<Entry> list() const;
  // Contents of a regular file; nullopt if absent or not a file.
  std::optional<std::string> readFile(std::string_view path) const;
  std::optional<uint32_t> fileMode(std::string_view path) const;
  bool exists(std::string_view path) const;

  // Plants a symlink (parents created); resolution refuses to go through it.
  void addSymlink(std::string_view path, std::string_view target);
  // Total bytes files may hold; writes beyond it fail with ENOSPC. freeBytes() = capacity - used.
  void setCapacity(uint64_t bytes);
  uint64_t usedBytes() const;

  // Forgets everything that was not made durable (see above).
  void simulateCrash();

  struct Node;
  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
};

}  // namespace dumpd::storage
