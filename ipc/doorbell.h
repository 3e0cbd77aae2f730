// An eventfd used as a doorbell between two processes.
//
// The ring protocol rings a doorbell only when the other side declared (in the ring header)
// that it is about to sleep, so a busy stream makes no syscall per record.
#pragma once

#include <cstdint>

#include "config/result.h"
#include "ipc/unique_fd.h"

namespace dumpd::ipc {

class Doorbell {
 public:
  Doorbell() = default;
  explicit Doorbell(UniqueFd fd) : fd_(std::move(fd)) {}
  static Result<Doorbell> create();  // non-blocking, close-on-exec eventfd

  // Adds 1 to the counter (wakes a waiter). Never blocks.
  void ring() const;
  // Waits until the counter is non-zero or `timeout_ms` passes (-1 = forever), consuming it.
  // Also returns when `also_fd` (if >= 0) becomes readable. Returns false on timeout.
  bool wait(int timeout_ms, int also_fd = -1) const;
  // Consumes any pending count without waiting.
  void drain() const;

  int fd() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  // Checks that `fd` really is an eventfd (a client could pass anything).
  static bool isEventFd(int fd);

 private:
  UniqueFd fd_;
};

}  // namespace dumpd::ipc
