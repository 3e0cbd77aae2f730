// The objects of the POSIX FileSystem (storage/fs/file_system.h): files, appenders and
// directories beneath one root directory fd. Internal to dumpd_fs: posix_directory.cc defines
// their out-of-line parts, posix_file_system.cc the FileSystem and its factories.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/unique_fd.h"
#include "storage/fs/credentials.h"
#include "storage/fs/file_system.h"

namespace dumpd::storage::posix {

// Every directory component is opened like this: a symlink fails with ELOOP (or ENOTDIR).
constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

// What a file system and all its objects share: the credentials its operations run with.
//
// Design: every call that resolves a name or creates, renames or removes an entry runs inside
// a ScopedCredentials of the client, so the kernel checks it as the client (no root override)
// and created entries get the client's owner. The old way, creating as root and then
// fchown()ing, checked nothing. Calls on an open descriptor (write, fsync, ftruncate) switch
// nothing: the rights were checked when it was opened. A scope ends with its call because the
// writer threads are shared by all sessions and a thread must never keep one client's rights
// while it works for another; a caller making many calls holds one scope around them
// (FileSystem::credentials(), as JobWriter does per call) and the calls' own scopes are free.
struct PosixContext {
  std::optional<Credentials> act_as;
  bool hard_links = true;  // PosixOptions::hard_links
  const Credentials* actor() const { return act_as ? &*act_as : nullptr; }
};

// Switches to the context's credentials for one operation; the error names it and the path.
Status actAs(ScopedCredentials& scope, const PosixContext& ctx, std::string_view what,
             std::string_view path);

// linkat() errors that mean "no link here" (linkFile answers kUnsupported): the file system
// has no hard links (EPERM on some, EOPNOTSUPP, ENOSYS), the file has too many (EMLINK), or
// the kernel forbids this caller to link it (EPERM: fs.protected_hardlinks).
bool hardLinkRefused(int err);

Status fsyncFd(int fd, std::string_view what, std::string_view path);

class PosixDirectory;
struct FromExisting;

// What a temporary file holds: what write() puts there (newFile), or an existing file's data
// (linkFile: a second hard link to it; copyFile: a copy); the latter two refuse write().
enum class Contents { kWritten, kHardLink, kCopy };

class PosixWritableFile final : public WritableFile {
 public:
  // `tmp` is the temporary name; the final name is the last component of `path`. `fd` is open
  // for writing (kWritten), or at least for reading (a link or copy: fsync needs an fd).
  PosixWritableFile(std::shared_ptr<const PosixDirectory> dir, int fd,
                    const char (&tmp)[kTemporaryNameMax], std::string path, size_t name_offset,
                    Contents contents = Contents::kWritten)
      : dir_(std::move(dir)),
        fd_(fd),
        path_(std::move(path)),
        name_offset_(name_offset),
        contents_(contents) {
    std::memcpy(tmp_, tmp, sizeof tmp_);
  }
  ~PosixWritableFile() override { abort(); }

  const std::string& path() const override { return path_; }
  uint64_t bytesWritten() const override { return written_; }
  Status write(std::span<const ConstBuffer> buffers) override;
  Status sync() override {
    if (::fdatasync(fd_.get()) != 0) return fsError(errno, "fsync", path_);
    return {};
  }
  Status commit() override;
  void abort() override;

  int fd() const { return fd_.get(); }
  // For a copy: what was put in the file before it was handed out.
  void setBytesWritten(uint64_t n) { written_ = n; }

 private:
  int dirfd() const;

  const char* name() const { return path_.c_str() + name_offset_; }

  std::shared_ptr<const PosixDirectory> dir_;  // keeps the directory fd open
  UniqueFd fd_;
  char tmp_[kTemporaryNameMax];  // inline: one allocation fewer per tensor
  std::string path_;
  size_t name_offset_;
  Contents contents_;
  uint64_t written_ = 0;
  bool done_ = false;
};

class PosixAppendFile final : public AppendFile {
 public:
  PosixAppendFile(int fd, uint64_t size, std::string path)
      : fd_(fd), size_(size), path_(std::move(path)) {}

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  Status append(std::string_view data) override {
    const char* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      ssize_t n = ::write(fd_.get(), p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        // Cut a partial row off again; we are the only appender of this file. Best effort
        // (a test, not a cast: a fortified ftruncate warns about an unused result even
        // through (void)).
        if (left != data.size() && ::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0) {
          // The write's error is the one reported.
        }
        return fsError(err, "append", path_);
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    size_ += data.size();
    return {};
  }
  Status sync() override { return fsyncFd(fd_.get(), "fsync", path_); }

 private:
  UniqueFd fd_;
  uint64_t size_;
  std::string path_;
};

class PosixDirectory final : public Directory, public std::enable_shared_from_this<PosixDirectory> {
 public:
  PosixDirectory(UniqueFd fd, std::string path, std::shared_ptr<const PosixContext> ctx)
      : fd_(std::move(fd)), path_(std::move(path)), ctx_(std::move(ctx)) {}

  int fd() const { return fd_.get(); }
  const PosixContext& context() const { return *ctx_; }
  const std::string& path() const override { return path_; }

  Result<std::unique_ptr<WritableFile>> newFile(std::string_view name, uint32_t mode) override {
    if (Status s = validateName(name); !s) return s.error();
    char tmp[kTemporaryNameMax];
    temporaryName(tmp);
    std::string path = joinPath(path_, name);
    ScopedCredentials scope;
    if (Status s = actAs(scope, *ctx_, "create", path); !s) return s.error();
    // O_EXCL|O_NOFOLLOW: never opens something that was already there (a planted symlink).
    int fd = ::openat(fd_.get(), tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      static_cast<mode_t>(mode));
    if (fd < 0) return fsError(errno, "create", path);
    size_t name_offset = path.size() - name.size();
    return std::unique_ptr<WritableFile>(std::make_unique<PosixWritableFile>(
        shared_from_this(), fd, tmp, std::move(path), name_offset));
  }

  Result<std::unique_ptr<WritableFile>> linkFile(std::string_view existing,
                                                 std::string_view name) override;
  Result<std::unique_ptr<WritableFile>> copyFile(std::string_view existing, std::string_view name,
                                                 uint32_t mode) override;
  Status prepareFromExisting(std::string_view existing, std::string_view name,
                             std::string_view what, ScopedCredentials& scope,
                             FromExisting& out) const;
  // False where a link to `file` could be neither committed nor aborted: in a sticky
  // directory only the owner of a file (or of the directory) may rename or remove its names.
  bool mayRenameLinksTo(const struct stat& file) const {
    const uid_t caller = ctx_->actor() ? ctx_->actor()->uid : ::geteuid();
    if (caller == 0 || file.st_uid == caller) return true;  // root keeps CAP_FOWNER
    struct stat dir;
    if (::fstat(fd_.get(), &dir) != 0) return false;  // a copy is always possible
    return (dir.st_mode & S_ISVTX) == 0 || dir.st_uid == caller;
  }

  Result<std::unique_ptr<AppendFile>> openAppend(std::string_view name) override {
    if (Status s = validateName(name); !s) return s.error();
    std::string n(name);
    std::string path = joinPath(path_, name);
    // O_NONBLOCK: opening a planted FIFO must not hang the writer (S_ISREG is checked below).
    constexpr int kFlags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
    UniqueFd guard;
    {
      ScopedCredentials scope;
      if (Status s = actAs(scope, *ctx_, "open", path); !s) return s.error();
      int fd = ::openat(fd_.get(), n.c_str(), kFlags | O_CREAT | O_EXCL, 0600);
      if (fd < 0 && errno == EEXIST) fd = ::openat(fd_.get(), n.c_str(), kFlags);
      if (fd < 0) return fsError(errno, "open", path);
      guard.reset(fd);
    }
    struct stat st;
    if (::fstat(guard.get(), &st) != 0) return fsError(errno, "stat", path);
    if (!S_ISREG(st.st_mode)) return fsError(EINVAL, "open (not a regular file)", path);
    return std::unique_ptr<AppendFile>(std::make_unique<PosixAppendFile>(
        guard.release(), static_cast<uint64_t>(st.st_size), std::move(path)));
  }

  Status syncFile(std::string_view name) override {
    if (Status s = validateName(name); !s) return s.error();
    std::string n(name);
    UniqueFd fd;
    {
      ScopedCredentials scope;
      if (Status s = actAs(scope, *ctx_, "fsync", joinPath(path_, name)); !s) return s;
      fd.reset(::openat(fd_.get(), n.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
      if (fd.get() < 0) return fsError(errno, "fsync", joinPath(path_, name));
    }
    return fsyncFd(fd.get(), "fsync", joinPath(path_, name));
  }

  Status sync() override { return fsyncFd(fd_.get(), "fsync directory", path_); }

  Result<uint64_t> removeStaleTemporaries() override {
    ScopedCredentials scope;
    if (Status s = actAs(scope, *ctx_, "read directory", path_); !s) return s.error();
    // A descriptor of its own: reading moves the offset, which fd_'s other users share.
    int fd = ::openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fsError(errno, "read directory", path_);
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(fd), &::closedir);
    if (!dir) {
      int err = errno;
      ::close(fd);
      return fsError(err, "read directory", path_);
    }
    // Collected first: whether readdir() still sees entries removed meanwhile is unspecified.
    std::vector<std::string> stale;
    errno = 0;
    while (struct dirent* e = ::readdir(dir.get())) {
      std::string_view name(e->d_name);
      if (isTemporaryName(name) && !isOwnTemporaryName(name)) stale.emplace_back(name);
    }
    if (errno != 0) return fsError(errno, "read directory", path_);
    uint64_t removed = 0;
    for (const std::string& name : stale) {
      if (::unlinkat(fd_.get(), name.c_str(), 0) == 0) {
        ++removed;
      } else if (errno != ENOENT) {  // ENOENT: someone else removed it first
        return fsError(errno, "remove", joinPath(path_, name));
      }
    }
    return removed;
  }

 private:
  UniqueFd fd_;
  std::string path_;
  std::shared_ptr<const PosixContext> ctx_;
};

// O_NONBLOCK: opening something that is not a regular file must not hang (it is refused).
constexpr int kReadFlags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;

// What linkFile and copyFile start from: the source `existing` and the file `name`, checked.
struct FromExisting {
  std::string from;       // `existing`
  std::string from_path;  // its root-relative path
  std::string path;       // `name`'s root-relative path
  size_t name_offset = 0;
  char tmp[kTemporaryNameMax];
  struct stat st {};  // the source's, not following a symlink
};

}  // namespace dumpd::storage::posix
