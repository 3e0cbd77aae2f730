// The file-system seam of storage: every file operation of the dump tree goes through it.
//
// All paths are relative to one root directory (the dump root) and are resolved component by
// component, never following a symbolic link: nothing beneath the root can redirect a write
// outside it. A path is '/'-separated components, none empty, "." or "..", no NUL; "" names
// the root itself.
//
// Files are written under a temporary name in their directory and published by an atomic
// rename (commit), so a reader sees a file complete or not at all. Errors are Status/Result
// whose code is kNoSpace (ENOSPC, EDQUOT), kPermission (EACCES, EPERM, EROFS, a symlink),
// kNotFound or kIo, and whose message names the root-relative path of the file.
//
// Thread-safety: FileSystem and Directory objects may be used from any number of threads at
// once. A WritableFile or AppendFile is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/result.h"
#include "storage/fs/credentials.h"

namespace dumpd::storage {

using ConstBuffer = std::span<const std::byte>;

inline ConstBuffer asBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The calls that can fail; the fault-injecting file system fails them by kind or by index.
enum class FsOp : uint8_t {
  kOpenDirectory,  // resolve (and maybe create) a directory
  kNewFile,        // create a temporary file
  kWrite,          // WritableFile::write
  kSyncFile,       // WritableFile::sync, AppendFile::sync, Directory::syncFile
  kCommit,         // rename a temporary file to its final name
  kOpenAppend,     // open (create) a file for appending
  kAppend,         // AppendFile::append
  kSyncDirectory,  // Directory::sync
  kFreeBytes,      // FileSystem::freeBytes
  kLink,           // Directory::linkFile: hard-link an existing file to a temporary name
  kCopy,           // Directory::copyFile: copy an existing file to a temporary name
};
inline constexpr int kFsOpCount = 11;
std::string_view fsOpName(FsOp op);

// OK when `path` is a valid root-relative path ("" included).
Status validateRelativePath(std::string_view path);
// OK when `name` is one valid path component.
Status validateName(std::string_view name);
// Joins a directory path and a name ("" + "a" -> "a").
std::string joinPath(std::string_view dir, std::string_view name);

// Temporary files are named ".dumpd-tmp-<pid>-<incarnation>-<n>": short (the final name may
// already use the 255 bytes a name may have) and unique within the process. <incarnation> is
// 8 random hex digits drawn once per process: a daemon restarted under the same pid (pid 1 of
// a container) can still tell its own temporary files from those a crash left behind.
inline constexpr size_t kTemporaryNameMax = 64;
std::string temporaryName();
// The same, NUL-terminated in a caller's buffer (no allocation).
void temporaryName(char (&buf)[kTemporaryNameMax]);
bool isTemporaryName(std::string_view name);
// True for a temporary name this process made (same pid and incarnation): a file being
// written now. Any other temporary name is a leftover of a process that died.
bool isOwnTemporaryName(std::string_view name);

// Maps an errno value to an ErrorCode, and builds "<what> <path>: <strerror>".
ErrorCode errorCodeForErrno(int err);
Error fsError(int err, std::string_view what, std::string_view path);

// A new file being written under a temporary name.
class WritableFile {
 public:
  // A file neither committed nor aborted is aborted: nothing half-written stays behind.
  virtual ~WritableFile() = default;

  // Root-relative final path.
  virtual const std::string& path() const = 0;
  virtual uint64_t bytesWritten() const = 0;

  // Writes every buffer, in order (one writev where possible).
  virtual Status write(std::span<const ConstBuffer> buffers) = 0;
  Status write(ConstBuffer data) { return write(std::span<const ConstBuffer>(&data, 1)); }
  // fsync of the file's data.
  virtual Status sync() = 0;
  // Publishes the file under its final name, replacing a file of that name. On error the
  // temporary file is removed. REQUIRES: neither committed nor aborted.
  virtual Status commit() = 0;
  // Removes the temporary file. Idempotent; a no-op after commit.
  virtual void abort() = 0;
};

// A file opened for appending (O_APPEND): statistic.csv, mapping.csv, manifest.jsonl.
class AppendFile {
 public:
  virtual ~AppendFile() = default;

  virtual const std::string& path() const = 0;
  // Size at open plus what this handle appended.
  virtual uint64_t size() const = 0;
  // Appends all of `data`; on error the file is cut back to its previous size (best effort),
  // so a row is written whole or not at all.
  virtual Status append(std::string_view data) = 0;
  virtual Status sync() = 0;
};

struct DirectoryOptions {
  bool create = false;        // mkdir -p the missing components (mode 0700, as MindSpore)
  bool sync_created = false;  // fsync each parent in which a component was created
};

// An open directory beneath the root (holds its fd: files are created without re-resolving).
class Directory {
 public:
  virtual ~Directory() = default;

  // Root-relative path ("" for the root).
  virtual const std::string& path() const = 0;
  // Starts file `name` (one component) under a temporary name; `mode` is the final mode.
  virtual Result<std::unique_ptr<WritableFile>> newFile(std::string_view name, uint32_t mode) = 0;
  // Starts file `name` (one component) as a hard link of `existing`, a committed regular file
  // of this directory. Nothing is visible under `name` until commit() (which, as for newFile,
  // replaces a file of that name); write() is refused (kInvalidArgument); bytesWritten() is 0.
  // Where the file system refuses the link (EMLINK: the file has too many; EPERM:
  // fs.protected_hardlinks or no links on this file system; EXDEV, EOPNOTSUPP/ENOTSUP,
  // ENOSYS; PosixOptions::hard_links false; the memory file system) the answer is
  // kUnsupported and nothing is created: whether a copy is worth its bytes is the caller's
  // decision (copyFile). A symbolic link or non-regular file at `existing` is refused
  // (kPermission / kInvalidArgument); a missing one is kNotFound. Errors name the
  // root-relative path.
  virtual Result<std::unique_ptr<WritableFile>> linkFile(std::string_view existing,
                                                         std::string_view name) = 0;
  // Starts file `name` (one component) as a copy of `existing`'s bytes with mode `mode`: a
  // file of its own, never a link. write() is refused; bytesWritten() is the bytes copied.
  // `existing` is refused as for linkFile.
  virtual Result<std::unique_ptr<WritableFile>> copyFile(std::string_view existing,
                                                         std::string_view name, uint32_t mode) = 0;
  // Opens `name` for appending, creating it (mode 0600: appended to again after a reopen, so
  // not MindSpore's 0400) when missing.
  virtual Result<std::unique_ptr<AppendFile>> openAppend(std::string_view name) = 0;
  // fsync of an existing file, by name.
  virtual Status syncFile(std::string_view name) = 0;
  // fsync of the directory itself (makes created, renamed and removed entries durable).
  virtual Status sync() = 0;
  // Removes the leftovers of crashed writers: every entry whose name isTemporaryName() but
  // not isOwnTemporaryName(). Returns how many were removed; an entry that cannot be removed
  // (a directory, EPERM) fails the call, after the others before it were removed.
  // REQUIRES: no other live process writes temporary files into this directory.
  virtual Result<uint64_t> removeStaleTemporaries() = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Opens directory `path`; with options.create, creates the missing components first.
  // A symbolic link or a non-directory on the way is refused (kPermission / kInvalidArgument).
  virtual Result<std::shared_ptr<Directory>> openDirectory(std::string_view path,
                                                           DirectoryOptions options) = 0;
  // Bytes available to unprivileged users on the root's file system (statvfs f_bavail).
  virtual Result<uint64_t> freeBytes() = 0;
  // The credentials every operation is performed with (PosixOptions::act_as); null: the
  // process's own. Operations switch to them one by one; a caller about to make many calls in
  // a row may hold a ScopedCredentials with them around all of them, which makes the calls'
  // own switches free (a nested scope with the same credentials does nothing).
  virtual const Credentials* credentials() const { return nullptr; }

  // mkdir -p beneath the root.
  Status createDirectories(std::string_view path, bool sync_created = false);
};

struct PosixOptions {
  // The client the daemon writes for. Set: every call that resolves a name or creates,
  // renames or removes an entry runs with these credentials (ScopedCredentials), so the
  // kernel applies the client's permissions (a root daemon has none of its own there) and
  // what is created belongs to the client's uid and gid. Writes to open files switch nothing.
  // Unset: the process's own credentials and ownership.
  std::optional<Credentials> act_as;
  // false: linkFile always answers kUnsupported (tests; file systems known to lack links).
  bool hard_links = true;
};

// The real file system beneath `root_dirfd`, which it takes ownership of (closed even on
// error). An O_PATH|O_DIRECTORY fd, as the client sends it, is enough.
// With options.act_as: a process that is not root can only act as its own uid (it then keeps
// its own credentials, which are the client's); another uid is refused with kPermission, as
// is a root process that cannot switch (no CAP_SETUID/CAP_SETGID).
Result<std::shared_ptr<FileSystem>> makePosixFileSystem(int root_dirfd, PosixOptions options = {});
// Opens `root_path` (O_PATH|O_DIRECTORY, as options.act_as when set) and wraps it; for tools
// and tests.
Result<std::shared_ptr<FileSystem>> openPosixFileSystem(const std::string& root_path,
                                                        PosixOptions options = {});

}  // namespace dumpd::storage
