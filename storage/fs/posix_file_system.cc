// FileSystem on the real file system: openat/mkdirat/renameat beneath one root directory fd.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "storage/fs/posix_internal.h"

namespace dumpd::storage {
namespace {

using posix::fsyncFd;
using posix::kDirFlags;
using posix::PosixContext;
using posix::PosixDirectory;

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
