#include "tools/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/unique_fd.h"

namespace dumpd::tools {
namespace {

ErrorCode codeFor(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return ErrorCode::kNotFound;
    case EACCES:
    case EPERM:
      return ErrorCode::kPermission;
    default:
      return ErrorCode::kIo;
  }
}

Error fail(int err, std::string_view what, const std::string& path) {
  return makeError(codeFor(err), std::string(what) + " " + path + ": " + std::strerror(err));
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) return fail(errno, "cannot open", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return makeError(ErrorCode::kInvalidArgument, path + " is not a regular file");
  }
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ == 0) return m;
  void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) return fail(errno, "cannot map", path);
  m.data_ = static_cast<const std::byte*>(p);
  return m;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

void MappedFile::adviseSequential() const {
  if (data_ == nullptr) return;
  (void)::madvise(const_cast<std::byte*>(data_), size_, MADV_SEQUENTIAL);
  (void)::madvise(const_cast<std::byte*>(data_), size_, MADV_WILLNEED);
}

}  // namespace dumpd::tools
