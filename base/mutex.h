// The annotated lock types: every mutex in dumpd is a Mutex, so clang's -Wthread-safety
// (base/thread_annotations.h) checks what it guards and the order locks are taken in.
//
//   Mutex mu_;
//   int n_ GUARDED_BY(mu_);
//   void bump() {
//     MutexLock lock(&mu_);
//     ++n_;
//   }
//
// CondVar's waits take the Mutex the caller holds. They have no predicate overloads: a
// lambda predicate is analysed as a separate function that holds no lock, so callers write
// the loop, which the analysis can see:
//
//   while (n_ == 0) cv_.wait(&mu_);
//
// Thin wrappers over std::mutex and std::condition_variable: no cost over using them
// directly.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/thread_annotations.h"

namespace dumpd {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool tryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds this mutex (a callback run under it, say).
  void assertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope. unlock() and lock() let a scope drop the lock around work
// that must not hold it (a syscall, a callback) and take it back.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  // Takes over a lock the caller already holds (taken by Mutex::tryLock, say).
  struct Adopt {};
  MutexLock(Mutex* mu, Adopt) REQUIRES(mu) : mu_(mu) {}
  ~MutexLock() RELEASE() {
    if (held_) mu_->unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() RELEASE() {
    mu_->unlock();
    held_ = false;
  }
  void lock() ACQUIRE() {
    mu_->lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// A condition variable. Each wait names the Mutex it releases, which the caller holds: the
// analysis checks that at the call (as absl::CondVar does).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu`, waits for a signal (or a spurious wake-up), takes `mu` back.
  void wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As wait(), giving up at `deadline`. False when the deadline passed.
  template <typename Clock, typename Duration>
  bool waitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool signalled = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return signalled;
  }
  void signal() { cv_.notify_one(); }
  void signalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace dumpd
