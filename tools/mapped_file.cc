#include "tools/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <mutex>
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

// The SIGBUS guard table. A slot is claimed with `used` (CAS), then `size` and `begin` are
// set; the handler reads `begin` then `size`. release() clears `begin` before the munmap.
struct GuardSlot {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0};
  std::atomic<size_t> size{0};
  std::atomic<bool> shrank{false};
};
std::array<GuardSlot, MappedFile::kGuardedMappings> g_guards;
struct sigaction g_previous {};

// Runs on the faulting thread. mmap is a plain system call in glibc (no lock, no allocation),
// which is what makes calling it here safe in practice.
void onSigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardSlot& g : g_guards) {
    // acquire: pairs with the release store of begin in guard(); size is set before it.
    const uintptr_t begin = g.begin.load(std::memory_order_acquire);
    const size_t size = g.size.load(std::memory_order_relaxed);
    if (begin == 0 || addr < begin || addr >= begin + size) continue;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t from = addr & ~(page - 1);
    void* p = ::mmap(reinterpret_cast<void*>(from), begin + size - from, PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) break;                       // cannot patch it: die as SIGBUS would
    g.shrank.store(true, std::memory_order_relaxed);  // read by shrank() after the read
    return;                                           // the faulting read runs again, on zeros
  }
  // Not one of ours: put the previous disposition back; the faulting instruction runs again
  // and meets it (the default: the process dies of SIGBUS).
  (void)sig;
  (void)context;
  ::sigaction(SIGBUS, &g_previous, nullptr);
}

int guard(const std::byte* data, size_t size) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = onSigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
  for (size_t i = 0; i < g_guards.size(); ++i) {
    GuardSlot& g = g_guards[i];
    bool expected = false;
    // acq_rel: a slot freed by release() (release store of used) is seen clean here.
    if (!g.used.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) continue;
    g.shrank.store(false, std::memory_order_relaxed);
    g.size.store(size, std::memory_order_relaxed);
    // release: pairs with the acquire in onSigbus; size is visible before begin.
    g.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

Result<UniqueFd> openRegularFile(const std::string& path, uint64_t* size, bool follow_link) {
  const int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (follow_link ? 0 : O_NOFOLLOW);
  UniqueFd fd(::open(path.c_str(), flags));
  if (!fd.valid()) {
    if (errno == ELOOP) {
      return makeError(ErrorCode::kInvalidArgument,
                       path + " is a symbolic link: dumpctl does not follow links in dump trees");
    }
    return fail(errno, "cannot open", path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(errno, "cannot stat", path);
  if (!S_ISREG(st.st_mode)) {
    return makeError(ErrorCode::kInvalidArgument, path + " is not a regular file");
  }
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  uint64_t size = 0;
  auto fd = openRegularFile(path, &size);
  if (!fd) return fd.error();
  return map(fd->get(), static_cast<size_t>(size), path);
}

Result<MappedFile> MappedFile::map(int fd, size_t size, const std::string& path) {
  MappedFile m;
  m.path_ = path;
  m.size_ = size;
  if (m.size_ == 0) return m;
  void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return fail(errno, "cannot map", path);
  m.data_ = static_cast<const std::byte*>(p);
  m.guard_ = guard(m.data_, m.size_);
  return m;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      guard_(std::exchange(other.guard_, -1)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    guard_ = std::exchange(other.guard_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() {
  if (guard_ >= 0) {
    GuardSlot& g = g_guards[static_cast<size_t>(guard_)];
    g.begin.store(0, std::memory_order_relaxed);     // no fault can come from this mapping now
    g.used.store(false, std::memory_order_release);  // pairs with the CAS in guard()
    guard_ = -1;
  }
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
}

bool MappedFile::shrank() const {
  // relaxed: the flag was set on this thread or on one whose reads this thread joined.
  return guard_ >= 0 &&
         g_guards[static_cast<size_t>(guard_)].shrank.load(std::memory_order_relaxed);
}

void MappedFile::adviseSequential() const {
  if (data_ == nullptr) return;
  (void)::madvise(const_cast<std::byte*>(data_), size_, MADV_SEQUENTIAL);
  (void)::madvise(const_cast<std::byte*>(data_), size_, MADV_WILLNEED);
}

}  // namespace dumpd::tools
