#include "ipc/socket_io.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

namespace dumpd::ipc {

Result<UniqueFd> connectUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return makeError(ErrorCode::kInvalidArgument,
                     "socket path '" + path + "' is empty or longer than " +
                         std::to_string(sizeof addr.sun_path - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return makeError(ErrorCode::kIo, std::string("socket: ") + strerror(errno));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    return makeError(ErrorCode::kUnavailable,
                     "cannot connect to dumpd at " + path + ": " + strerror(e) +
                         (e == ENOENT || e == ECONNREFUSED ? " (is the daemon running?)" : ""));
  }
  return fd;
}

Status sendFrame(int sock, const v1::Envelope& env, std::span<const int> fds) {
  auto frame = encodeFrame(env);
  if (!frame) return frame.error();
  const std::string& bytes = frame.value();
  size_t sent = 0;
  bool fds_sent = fds.empty();
  while (sent < bytes.size()) {
    iovec iov{const_cast<char*>(bytes.data() + sent), bytes.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
    if (!fds_sent) {
      if (fds.size() > kMaxFdsPerMessage) {
        return makeError(ErrorCode::kInvalidArgument, "too many fds for one message");
      }
      std::memset(control, 0, sizeof control);
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{sock, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      return makeError(ErrorCode::kUnavailable,
                       std::string("sending to dumpd failed: ") + strerror(errno));
    }
    fds_sent = true;
    sent += static_cast<size_t>(n);
  }
  return {};
}

ssize_t recvWithFds(int sock, FrameDecoder& decoder, std::vector<UniqueFd>& fds) {
  char buf[64 * 1024];
  iovec iov{buf, sizeof buf};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -errno;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds.emplace_back(fd);
      }
    }
  }
  // MSG_CTRUNC: more fds than we accept were sent; the kernel closed the extras.
  if (n > 0) decoder.append(buf, static_cast<size_t>(n));
  return n;
}

Result<v1::Envelope> recvFrame(int sock, FrameDecoder& decoder, int timeout_ms) {
  for (;;) {
    auto env = decoder.next();
    if (!env) return env.error();
    if (env.value().has_value()) return std::move(*env.value());
    pollfd p{sock, POLLIN, 0};
    int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return makeError(ErrorCode::kTimeout, "timed out waiting for dumpd");
    std::vector<UniqueFd> ignored;
    const ssize_t n = recvWithFds(sock, decoder, ignored);
    if (n == 0) return makeError(ErrorCode::kUnavailable, "dumpd closed the connection");
    if (n < 0 && n != -EAGAIN) {
      return makeError(ErrorCode::kUnavailable,
                       std::string("reading from dumpd failed: ") + strerror(static_cast<int>(-n)));
    }
  }
}

}  // namespace dumpd::ipc
