#include "ipc/doorbell.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace dumpd::ipc {

Result<Doorbell> Doorbell::create() {
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return makeError(ErrorCode::kIo, std::string("eventfd: ") + strerror(errno));
  return Doorbell(UniqueFd(fd));
}

void Doorbell::ring() const {
  uint64_t one = 1;
  // EAGAIN means the counter is saturated: the waiter will wake anyway.
  ssize_t n = ::write(fd_.get(), &one, sizeof one);
  (void)n;
}

void Doorbell::drain() const {
  uint64_t v;
  ssize_t n = ::read(fd_.get(), &v, sizeof v);
  (void)n;
}

bool Doorbell::wait(int timeout_ms, int also_fd) const {
  pollfd fds[2] = {{fd_.get(), POLLIN, 0}, {also_fd, POLLIN, 0}};
  int nfds = also_fd >= 0 ? 2 : 1;
  for (;;) {
    int r = ::poll(fds, nfds, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    if (fds[0].revents & POLLIN) drain();
    return true;
  }
}

bool Doorbell::isEventFd(int fd) {
  char link[64];
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = ::readlink(path, link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = 0;
  return std::string(link) == "anon_inode:[eventfd]";
}

}  // namespace dumpd::ipc
