// FileSystem on the real file system: openat/mkdirat/renameat beneath one root directory fd.
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "storage/fs/credentials.h"
#include "storage/fs/file_copy.h"
#include "storage/fs/file_system.h"

namespace dumpd::storage {
namespace {

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
             std::string_view path) {
  if (Status s = scope.enter(ctx.actor()); !s) {
    return makeError(s.error().code, std::string(what) + " " +
                                         std::string(path.empty() ? "." : path) + ": " +
                                         s.error().message);
  }
  return {};
}

// linkat() errors that mean "no link here" (linkFile answers kUnsupported): the file system
// has no hard links (EPERM on some, EOPNOTSUPP, ENOSYS), the file has too many (EMLINK), or
// the kernel forbids this caller to link it (EPERM: fs.protected_hardlinks).
bool hardLinkRefused(int err) {
  switch (err) {
    case EPERM:
    case EMLINK:
    case EXDEV:
    case EOPNOTSUPP:
#if ENOTSUP != EOPNOTSUPP
    case ENOTSUP:
#endif
    case ENOSYS:
      return true;
    default:
      return false;
  }
}

Status fsyncFd(int fd, std::string_view what, std::string_view path) {
  if (::fsync(fd) != 0) return fsError(errno, what, path);
  return {};
}

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
        // Cut a partial row off again; we are the only appender of this file.
        if (left != data.size()) (void)::ftruncate(fd_.get(), static_cast<off_t>(size_));
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

// Checks both names, enters the credentials (into `scope`, the caller's) and refuses a
// source that is a symbolic link or not a regular file. `what` ("link", "copy") begins every
// error message.
Status PosixDirectory::prepareFromExisting(std::string_view existing, std::string_view name,
                                           std::string_view what, ScopedCredentials& scope,
                                           FromExisting& out) const {
  if (Status s = validateName(existing); !s) return s;
  if (Status s = validateName(name); !s) return s;
  out.from.assign(existing);
  out.from_path = joinPath(path_, existing);
  out.path = joinPath(path_, name);
  out.name_offset = out.path.size() - name.size();
  temporaryName(out.tmp);
  if (Status s = actAs(scope, *ctx_, what, out.path); !s) return s;
  if (::fstatat(fd_.get(), out.from.c_str(), &out.st, AT_SYMLINK_NOFOLLOW) != 0) {
    return fsError(errno, what, out.from_path);
  }
  if (S_ISLNK(out.st.st_mode)) return fsError(ELOOP, what, out.from_path);
  if (!S_ISREG(out.st.st_mode)) {
    return fsError(EINVAL, std::string(what) + " (not a regular file)", out.from_path);
  }
  return {};
}

// A hard link needs read access to `existing` as well: the link is opened, to check that it
// is the file that was checked (not a symlink put there meanwhile) and for sync().
Result<std::unique_ptr<WritableFile>> PosixDirectory::linkFile(std::string_view existing,
                                                               std::string_view name) {
  ScopedCredentials scope;
  FromExisting f;
  if (Status s = prepareFromExisting(existing, name, "link", scope, f); !s) return s.error();
  if (!ctx_->hard_links) {
    return makeError(ErrorCode::kUnsupported, "link " + f.from_path + " to " + f.path +
                                                  ": hard links are off for this root");
  }
  if (!mayRenameLinksTo(f.st)) {
    return makeError(ErrorCode::kUnsupported,
                     "link " + f.from_path + " to " + f.path +
                         ": another user's file in a sticky directory (its link could not be "
                         "committed)");
  }
  // Flags 0: a symlink is never followed. One put at `existing` since the check would be
  // linked itself: opening the link with O_NOFOLLOW and comparing inodes refuses it.
  if (::linkat(fd_.get(), f.from.c_str(), fd_.get(), f.tmp, 0) != 0) {
    const int err = errno;
    Error e = fsError(err, "link " + f.from_path + " to", f.path);
    if (hardLinkRefused(err)) e.code = ErrorCode::kUnsupported;
    return e;
  }
  UniqueFd linked(::openat(fd_.get(), f.tmp, kReadFlags));
  struct stat now;
  if (!linked.valid() || ::fstat(linked.get(), &now) != 0) {
    int err = errno;
    (void)::unlinkat(fd_.get(), f.tmp, 0);
    return fsError(err, "link", f.from_path);
  }
  if (now.st_dev != f.st.st_dev || now.st_ino != f.st.st_ino) {
    (void)::unlinkat(fd_.get(), f.tmp, 0);
    return makeError(ErrorCode::kIo, "link " + f.from_path + ": replaced while being linked");
  }
  return std::unique_ptr<WritableFile>(
      std::make_unique<PosixWritableFile>(shared_from_this(), linked.release(), f.tmp,
                                          std::move(f.path), f.name_offset, Contents::kHardLink));
}

// The source is opened first: nothing is created for a file that cannot be read.
Result<std::unique_ptr<WritableFile>> PosixDirectory::copyFile(std::string_view existing,
                                                               std::string_view name,
                                                               uint32_t mode) {
  ScopedCredentials scope;
  FromExisting f;
  if (Status s = prepareFromExisting(existing, name, "copy", scope, f); !s) return s.error();
  UniqueFd source(::openat(fd_.get(), f.from.c_str(), kReadFlags));
  if (!source.valid()) return fsError(errno, "copy", f.from_path);
  struct stat st;
  if (::fstat(source.get(), &st) != 0) return fsError(errno, "copy", f.from_path);
  if (!S_ISREG(st.st_mode)) return fsError(EINVAL, "copy (not a regular file)", f.from_path);
  int fd = ::openat(fd_.get(), f.tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    static_cast<mode_t>(mode));
  if (fd < 0) return fsError(errno, "create", f.path);
  // From here on the file's destructor removes the temporary file on error.
  auto file = std::make_unique<PosixWritableFile>(shared_from_this(), fd, f.tmp, std::move(f.path),
                                                  f.name_offset, Contents::kCopy);
  CopyOutcome copied = copyFileData(source.get(), file->fd());
  if (copied.error != 0) return fsError(copied.error, "copy", file->path());
  file->setBytesWritten(copied.bytes);
  return std::unique_ptr<WritableFile>(std::move(file));
}

int PosixWritableFile::dirfd() const { return dir_->fd(); }

Status PosixWritableFile::write(std::span<const ConstBuffer> buffers) {
  if (contents_ != Contents::kWritten) {
    return makeError(ErrorCode::kInvalidArgument,
                     "write " + path_ + ": a linked file is read-only");
  }
  constexpr size_t kMaxIov = IOV_MAX < 64 ? IOV_MAX : 64;
  struct iovec iov[kMaxIov];
  size_t next = 0;    // first buffer not yet (wholly) queued
  size_t offset = 0;  // bytes of buffers[next] already written
  while (next < buffers.size()) {
    size_t count = 0;
    for (size_t i = next; i < buffers.size() && count < kMaxIov; ++i) {
      size_t skip = i == next ? offset : 0;
      if (buffers[i].size() == skip) continue;
      iov[count].iov_base = const_cast<std::byte*>(buffers[i].data() + skip);
      iov[count].iov_len = buffers[i].size() - skip;
      ++count;
    }
    if (count == 0) break;
    ssize_t n = ::writev(fd_.get(), iov, static_cast<int>(count));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fsError(errno, "write", path_);
    }
    written_ += static_cast<uint64_t>(n);
    // Advance over what was written.
    size_t left = static_cast<size_t>(n);
    while (next < buffers.size()) {
      size_t avail = buffers[next].size() - offset;
      if (left < avail) {
        offset += left;
        break;
      }
      left -= avail;
      ++next;
      offset = 0;
    }
  }
  return {};
}

Status PosixWritableFile::commit() {
  if (done_) return makeError(ErrorCode::kInternal, "commit of a finished file " + path_);
  // close() reports deferred write errors on some file systems: check it before publishing.
  if (::close(fd_.release()) != 0) {
    Error e = fsError(errno, "close", path_);
    abort();
    return e;
  }
  ScopedCredentials scope;
  if (Status s = actAs(scope, dir_->context(), "rename", path_); !s) {
    abort();
    return s;
  }
  if (::renameat(dirfd(), tmp_, dirfd(), name()) != 0) {
    Error e = fsError(errno, "rename", path_);
    abort();
    return e;
  }
  // rename() of two links to one file succeeds and does nothing: when `name` already was
  // another name of the linked file the temporary name is still there.
  if (contents_ == Contents::kHardLink) (void)::unlinkat(dirfd(), tmp_, 0);
  done_ = true;
  return {};
}

void PosixWritableFile::abort() {
  if (done_) return;
  done_ = true;
  fd_.reset();
  ScopedCredentials scope;
  // Not as root: when the switch fails the temporary file stays (a later daemon's
  // removeStaleTemporaries() takes it away).
  if (!scope.enter(dir_->context().actor())) return;
  (void)::unlinkat(dirfd(), tmp_, 0);
}

class PosixFileSystem final : public FileSystem {
 public:
  PosixFileSystem(UniqueFd root, std::shared_ptr<const PosixContext> ctx)
      : root_(std::move(root)), ctx_(std::move(ctx)) {}

  const Credentials* credentials() const override { return ctx_->actor(); }

  Result<std::shared_ptr<Directory>> openDirectory(std::string_view path,
                                                   DirectoryOptions options) override {
    if (Status s = validateRelativePath(path); !s) return s.error();
    ScopedCredentials scope;
    if (Status s = actAs(scope, *ctx_, "open directory", path); !s) return s.error();
    if (path.empty()) {
      // The root fd may be O_PATH (no fsync on it): open a real descriptor of it.
      UniqueFd fd(::openat(root_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (fd.get() < 0) return fsError(errno, "open directory", "");
      return std::shared_ptr<Directory>(
          std::make_shared<PosixDirectory>(std::move(fd), std::string(), ctx_));
    }
    UniqueFd current;  // the directory resolved so far; empty = the root
    std::string component;
    size_t start = 0;
    while (start <= path.size()) {
      size_t end = path.find('/', start);
      if (end == std::string_view::npos) end = path.size();
      component.assign(path.substr(start, end - start));
      std::string_view sub = path.substr(0, end);
      int parent = current.get() >= 0 ? current.get() : root_.get();
      int fd = ::openat(parent, component.c_str(), kDirFlags);
      bool created = false;
      if (fd < 0 && errno == ENOENT && options.create) {
        if (::mkdirat(parent, component.c_str(), 0700) == 0) {
          created = true;
        } else if (errno != EEXIST) {
          return fsError(errno, "mkdir", sub);
        }
        fd = ::openat(parent, component.c_str(), kDirFlags);
      }
      if (fd < 0) {
        int err = errno;
        // With O_DIRECTORY a symlink may fail as ENOTDIR: name the real reason.
        struct stat st;
        if ((err == ENOTDIR || err == ELOOP) &&
            ::fstatat(parent, component.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(st.st_mode)) {
          err = ELOOP;
        }
        return fsError(err, "open directory", sub);
      }
      if (created) {
        if (options.sync_created) {
          Status s = syncParent(current, path.substr(0, start == 0 ? 0 : start - 1));
          if (!s) {
            ::close(fd);
            return s.error();
          }
        }
      }
      current.reset(fd);
      start = end + 1;
    }
    return std::shared_ptr<Directory>(
        std::make_shared<PosixDirectory>(std::move(current), std::string(path), ctx_));
  }

  Result<uint64_t> freeBytes() override {
    struct statvfs st;
    if (::fstatvfs(root_.get(), &st) != 0) return fsError(errno, "statvfs", "");
    return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
  }

 private:
  // fsync of `parent` (empty = the root, which needs a real fd first).
  Status syncParent(const UniqueFd& parent, std::string_view parent_path) {
    if (parent.get() >= 0) return fsyncFd(parent.get(), "fsync directory", parent_path);
    UniqueFd fd(::openat(root_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0) return fsError(errno, "fsync directory", "");
    return fsyncFd(fd.get(), "fsync directory", "");
  }

  UniqueFd root_;
  std::shared_ptr<const PosixContext> ctx_;
};

// The credentials a file system acts with: as asked, or none when the process already is the
// client (a daemon running as the job's user may not switch groups, and needs not).
Result<std::optional<Credentials>> effectiveActor(std::optional<Credentials> act_as) {
  if (!act_as) return act_as;
  const uid_t euid = ::geteuid();
  if (euid == 0) return act_as;
  if (act_as->uid == euid) return std::optional<Credentials>();
  return makeError(ErrorCode::kPermission,
                   "dumpd runs as uid " + std::to_string(euid) + " and cannot act as uid " +
                       std::to_string(act_as->uid) + "; run it as root or as the job's user");
}

}  // namespace

Result<std::shared_ptr<FileSystem>> makePosixFileSystem(int root_dirfd, PosixOptions options) {
  UniqueFd root(root_dirfd);
  if (root.get() < 0) return makeError(ErrorCode::kInvalidArgument, "invalid dump root fd");
  struct stat st;
  if (::fstat(root.get(), &st) != 0) return fsError(errno, "stat", "");
  if (!S_ISDIR(st.st_mode)) return fsError(ENOTDIR, "open dump root", "");
  auto ctx = std::make_shared<PosixContext>();
  auto actor = effectiveActor(std::move(options.act_as));
  if (!actor) return actor.error();
  ctx->act_as = std::move(actor.value());
  ctx->hard_links = options.hard_links;
  // Fail now, not at the first file: a root process without CAP_SETUID/CAP_SETGID.
  ScopedCredentials probe;
  if (Status s = probe.enter(ctx->actor()); !s) return s.error();
  return std::shared_ptr<FileSystem>(std::make_shared<PosixFileSystem>(std::move(root), ctx));
}

Result<std::shared_ptr<FileSystem>> openPosixFileSystem(const std::string& root_path,
                                                        PosixOptions options) {
  auto actor = effectiveActor(options.act_as);
  if (!actor) return actor.error();
  int fd;
  {
    ScopedCredentials scope;
    const Credentials* as = actor.value() ? &*actor.value() : nullptr;
    if (Status s = scope.enter(as); !s) return s.error();
    fd = ::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return fsError(errno, "open dump root", root_path);
  }
  return makePosixFileSystem(fd, std::move(options));
}

}  // namespace dumpd::storage
