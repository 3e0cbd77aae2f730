#include "storage/fs/file_system.h"

#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace dumpd::storage {
namespace {

constexpr std::string_view kTemporaryPrefix = ".dumpd-tmp-";

// Drawn once per process (see temporaryName()).
uint32_t incarnation() {
  static const uint32_t value = [] {
    uint32_t v = 0;
    if (::getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v)) {
      v = static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    }
    return v;
  }();
  return value;
}

// ".dumpd-tmp-<pid>-<incarnation>-" into buf; returns its length.
int ownTemporaryPrefix(char (&buf)[kTemporaryNameMax]) {
  return std::snprintf(buf, sizeof buf, "%.*s%d-%08x-", static_cast<int>(kTemporaryPrefix.size()),
                       kTemporaryPrefix.data(), static_cast<int>(::getpid()), incarnation());
}

}  // namespace

std::string_view fsOpName(FsOp op) {
  switch (op) {
    case FsOp::kOpenDirectory:
      return "open directory";
    case FsOp::kNewFile:
      return "create";
    case FsOp::kWrite:
      return "write";
    case FsOp::kSyncFile:
      return "fsync";
    case FsOp::kCommit:
      return "rename";
    case FsOp::kOpenAppend:
      return "open";
    case FsOp::kAppend:
      return "append";
    case FsOp::kSyncDirectory:
      return "fsync directory";
    case FsOp::kFreeBytes:
      return "statvfs";
    case FsOp::kLink:
      return "link";
    case FsOp::kCopy:
      return "copy";
  }
  return "unknown";
}

Status validateName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") {
    return makeError(ErrorCode::kInvalidArgument,
                     "invalid path component '" + std::string(name) + "'");
  }
  if (name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos) {
    return makeError(ErrorCode::kInvalidArgument,
                     "path component contains '/' or NUL: '" + std::string(name) + "'");
  }
  return {};
}

Status validateRelativePath(std::string_view path) {
  if (path.empty()) return {};
  size_t start = 0;
  while (true) {
    size_t end = path.find('/', start);
    std::string_view component =
        path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (Status s = validateName(component); !s) {
      return makeError(ErrorCode::kInvalidArgument,
                       "invalid path '" + std::string(path) + "': " + s.error().message);
    }
    if (end == std::string_view::npos) return {};
    start = end + 1;
  }
}

std::string joinPath(std::string_view dir, std::string_view name) {
  std::string out;
  out.reserve(dir.size() + 1 + name.size());
  out.append(dir);
  if (!dir.empty()) out.push_back('/');
  out.append(name);
  return out;
}

void temporaryName(char (&buf)[kTemporaryNameMax]) {
  static std::atomic<uint64_t> counter{0};
  // Relaxed: only uniqueness matters.
  uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  int len = ownTemporaryPrefix(buf);
  std::snprintf(buf + len, sizeof buf - static_cast<size_t>(len), "%llu",
                static_cast<unsigned long long>(n));
}

std::string temporaryName() {
  char buf[kTemporaryNameMax];
  temporaryName(buf);
  return buf;
}

bool isTemporaryName(std::string_view name) { return name.starts_with(kTemporaryPrefix); }

bool isOwnTemporaryName(std::string_view name) {
  char prefix[kTemporaryNameMax];
  int len = ownTemporaryPrefix(prefix);
  return name.starts_with(std::string_view(prefix, static_cast<size_t>(len)));
}

ErrorCode errorCodeForErrno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return ErrorCode::kNoSpace;
    case EACCES:
    case EPERM:
    case EROFS:
    case ELOOP:
      return ErrorCode::kPermission;
    case ENOENT:
      return ErrorCode::kNotFound;
    case ENOTDIR:
    case EISDIR:
    case ENAMETOOLONG:
    case EINVAL:
      return ErrorCode::kInvalidArgument;
    default:
      return ErrorCode::kIo;
  }
}

Error fsError(int err, std::string_view what, std::string_view path) {
  char buf[128];
  // GNU strerror_r: returns a pointer to the message (maybe not `buf`).
  const char* text = ::strerror_r(err, buf, sizeof buf);
  std::string message;
  message.reserve(what.size() + path.size() + 48);
  message.append(what);
  message.push_back(' ');
  message.append(path.empty() ? std::string_view(".") : path);
  message.append(": ");
  if (err == ELOOP) {
    message.append("is a symbolic link, refusing to follow it");
  } else {
    message.append(text);
  }
  return makeError(errorCodeForErrno(err), std::move(message));
}

Status FileSystem::createDirectories(std::string_view path, bool sync_created) {
  auto dir = openDirectory(path, {.create = true, .sync_created = sync_created});
  if (!dir) return dir.error();
  return {};
}

}  // namespace dumpd::storage
