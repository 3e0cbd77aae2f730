// An immutable value one thread publishes and others read (status figures).
//
// The mutex guards only the pointer copy, a reference-count increment: it is never held across
// anything else, so a reader waits at most for another pointer copy, and the old value is
// freed outside it. (libstdc++ 12's std::atomic<std::shared_ptr> would do the same, but
// ThreadSanitizer does not understand its lock bit and reports a race.)
#pragma once

#include <memory>

#include "base/mutex.h"

namespace dumpd {

template <typename T>
class Snapshot {
 public:
  std::shared_ptr<const T> load() const {
    MutexLock lock(&mu_);
    return value_;
  }
  // `value` leaves with the previous pointer and releases it after the lock.
  void store(std::shared_ptr<const T> value) {
    MutexLock lock(&mu_);
    value_.swap(value);
  }

 private:
  mutable Mutex mu_;
  std::shared_ptr<const T> value_ GUARDED_BY(mu_);
};

}  // namespace dumpd
