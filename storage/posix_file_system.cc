// FileSystem on the real file system: openat/mkdirat/renameat beneath one root directory fd.
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "storage/file_system.h"

namespace dumpd::storage {
namespace {

// Every directory component is opened like this: a symlink fails with ELOOP (or ENOTDIR).
constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Who created files belong to. Shared by the file system and its directories.
class OwnerPolicy {
 public:
  explicit OwnerPolicy(const PosixOptions& o)
      : uid_(o.owner_uid ? static_cast<uid_t>(*o.owner_uid) : static_cast<uid_t>(-1)),
        gid_(o.owner_gid ? static_cast<gid_t>(*o.owner_gid) : static_cast<gid_t>(-1)) {
    bool uid_differs = o.owner_uid && *o.owner_uid != ::geteuid();
    bool gid_differs = o.owner_gid && *o.owner_gid != ::getegid();
    enabled_.store(uid_differs || gid_differs, std::memory_order_relaxed);
  }

  // Best effort: EPERM (an unprivileged daemon) switches chown off for good.
  void apply(int fd) {
    // Relaxed: a stale `true` only costs one more failing fchown.
    if (!enabled_.load(std::memory_order_relaxed)) return;
    if (::fchown(fd, uid_, gid_) != 0 && errno == EPERM) {
      enabled_.store(false, std::memory_order_relaxed);
    }
  }

 private:
  const uid_t uid_;
  const gid_t gid_;
  std::atomic<bool> enabled_{false};
};

Status fsyncFd(int fd, std::string_view what, std::string_view path) {
  if (::fsync(fd) != 0) return fsError(errno, what, path);
  return {};
}

class PosixDirectory;

class PosixWritableFile final : public WritableFile {
 public:
  // `tmp` is the temporary name; the final name is the last component of `path`.
  PosixWritableFile(std::shared_ptr<const PosixDirectory> dir, int fd,
                    const char (&tmp)[kTemporaryNameMax], std::string path, size_t name_offset)
      : dir_(std::move(dir)), fd_(fd), path_(std::move(path)), name_offset_(name_offset) {
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

 private:
  int dirfd() const;

  const char* name() const { return path_.c_str() + name_offset_; }

  std::shared_ptr<const PosixDirectory> dir_;  // keeps the directory fd open
  UniqueFd fd_;
  char tmp_[kTemporaryNameMax];  // inline: one allocation fewer per tensor
  std::string path_;
  size_t name_offset_;
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
  PosixDirectory(UniqueFd fd, std::string path, std::shared_ptr<OwnerPolicy> owner)
      : fd_(std::move(fd)), path_(std::move(path)), owner_(std::move(owner)) {}

  int fd() const { return fd_.get(); }
  const std::string& path() const override { return path_; }

  Result<std::unique_ptr<WritableFile>> newFile(std::string_view name, uint32_t mode) override {
    if (Status s = validateName(name); !s) return s.error();
    char tmp[kTemporaryNameMax];
    temporaryName(tmp);
    // O_EXCL|O_NOFOLLOW: never opens something that was already there (a planted symlink).
    int fd = ::openat(fd_.get(), tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      static_cast<mode_t>(mode));
    std::string path = joinPath(path_, name);
    if (fd < 0) return fsError(errno, "create", path);
    owner_->apply(fd);
    size_t name_offset = path.size() - name.size();
    return std::unique_ptr<WritableFile>(std::make_unique<PosixWritableFile>(
        shared_from_this(), fd, tmp, std::move(path), name_offset));
  }

  Result<std::unique_ptr<AppendFile>> openAppend(std::string_view name) override {
    if (Status s = validateName(name); !s) return s.error();
    std::string n(name);
    std::string path = joinPath(path_, name);
    // O_NONBLOCK: opening a planted FIFO must not hang the writer (S_ISREG is checked below).
    constexpr int kFlags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
    int fd = ::openat(fd_.get(), n.c_str(), kFlags | O_CREAT | O_EXCL, 0644);
    bool created = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = ::openat(fd_.get(), n.c_str(), kFlags);
    if (fd < 0) return fsError(errno, "open", path);
    UniqueFd guard(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) return fsError(errno, "stat", path);
    if (!S_ISREG(st.st_mode)) return fsError(EINVAL, "open (not a regular file)", path);
    if (created) owner_->apply(fd);
    return std::unique_ptr<AppendFile>(std::make_unique<PosixAppendFile>(
        guard.release(), static_cast<uint64_t>(st.st_size), std::move(path)));
  }

  Status syncFile(std::string_view name) override {
    if (Status s = validateName(name); !s) return s.error();
    std::string n(name);
    UniqueFd fd(::openat(fd_.get(), n.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (fd.get() < 0) return fsError(errno, "fsync", joinPath(path_, name));
    return fsyncFd(fd.get(), "fsync", joinPath(path_, name));
  }

  Status sync() override { return fsyncFd(fd_.get(), "fsync directory", path_); }

 private:
  UniqueFd fd_;
  std::string path_;
  std::shared_ptr<OwnerPolicy> owner_;
};

int PosixWritableFile::dirfd() const { return dir_->fd(); }

Status PosixWritableFile::write(std::span<const ConstBuffer> buffers) {
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
  if (::renameat(dirfd(), tmp_, dirfd(), name()) != 0) {
    Error e = fsError(errno, "rename", path_);
    abort();
    return e;
  }
  done_ = true;
  return {};
}

void PosixWritableFile::abort() {
  if (done_) return;
  done_ = true;
  fd_.reset();
  (void)::unlinkat(dirfd(), tmp_, 0);
}

class PosixFileSystem final : public FileSystem {
 public:
  PosixFileSystem(UniqueFd root, const PosixOptions& options)
      : root_(std::move(root)), owner_(std::make_shared<OwnerPolicy>(options)) {}

  Result<std::shared_ptr<Directory>> openDirectory(std::string_view path,
                                                   DirectoryOptions options) override {
    if (Status s = validateRelativePath(path); !s) return s.error();
    if (path.empty()) {
      // The root fd may be O_PATH (no fsync on it): open a real descriptor of it.
      UniqueFd fd(::openat(root_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (fd.get() < 0) return fsError(errno, "open directory", "");
      return std::shared_ptr<Directory>(
          std::make_shared<PosixDirectory>(std::move(fd), std::string(), owner_));
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
        if (::mkdirat(parent, component.c_str(), 0755) == 0) {
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
        owner_->apply(fd);
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
        std::make_shared<PosixDirectory>(std::move(current), std::string(path), owner_));
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
  std::shared_ptr<OwnerPolicy> owner_;
};

}  // namespace

Result<std::shared_ptr<FileSystem>> makePosixFileSystem(int root_dirfd, PosixOptions options) {
  UniqueFd root(root_dirfd);
  if (root.get() < 0) return makeError(ErrorCode::kInvalidArgument, "invalid dump root fd");
  struct stat st;
  if (::fstat(root.get(), &st) != 0) return fsError(errno, "stat", "");
  if (!S_ISDIR(st.st_mode)) return fsError(ENOTDIR, "open dump root", "");
  return std::shared_ptr<FileSystem>(std::make_shared<PosixFileSystem>(std::move(root), options));
}

Result<std::shared_ptr<FileSystem>> openPosixFileSystem(const std::string& root_path,
                                                        PosixOptions options) {
  int fd = ::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fsError(errno, "open dump root", root_path);
  return makePosixFileSystem(fd, options);
}

}  // namespace dumpd::storage
