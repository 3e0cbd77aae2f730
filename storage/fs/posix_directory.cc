#include <dirent.h>
#include <limits.h>
#include <sys/statvfs.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "storage/fs/file_copy.h"
#include "storage/fs/posix_internal.h"

namespace dumpd::storage::posix {

Status actAs(ScopedCredentials& scope, const PosixContext& ctx, std::string_view what,
             std::string_view path) {
  if (Status s = scope.enter(ctx.actor()); !s) {
    return makeError(s.error().code, std::string(what) + " " +
                                         std::string(path.empty() ? "." : path) + ": " +
                                         s.error().message);
  }
  return {};
}

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

}  // namespace dumpd::storage::posix
