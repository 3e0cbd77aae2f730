// A bounded queue (in bytes) in front of N writer threads, fair between owners.
//
// Each task belongs to an owner (the daemon: one per session). Owners are served in turn
// (round robin), each owner's tasks in submission order, so one owner's backlog delays
// another's task by at most one task per thread. Bytes are bounded twice: all queued and
// running tasks together (capacity_bytes), and per owner (owner_capacity_bytes), so one owner
// cannot take the whole budget and make everyone else's submit wait behind it.
//
// Thread-safety: every method may be called from any thread. Completion order across threads
// is not ordered, so callers that need in-order release track completion themselves.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "base/mutex.h"

namespace dumpd::storage {

class WriterPool {
 public:
  using Task = std::function<void()>;

  // REQUIRES: threads >= 1, capacity_bytes >= 1. `on_thread_start` (optional) runs first on
  // each pool thread (the daemon lowers their scheduling priority there).
  // owner_capacity_bytes 0 = capacity_bytes.
  WriterPool(unsigned threads, uint64_t capacity_bytes,
             std::function<void()> on_thread_start = nullptr, uint64_t owner_capacity_bytes = 0);
  // Runs every queued task, then joins the threads.
  ~WriterPool();
  WriterPool(const WriterPool&) = delete;
  WriterPool& operator=(const WriterPool&) = delete;

  // Blocks while `bytes` do not fit the free capacity of the pool or of the owner; a task
  // larger than a capacity is admitted once the pool (or the owner) has nothing pending
  // (never deadlocks).
  void submit(uint64_t owner, uint64_t bytes, Task task);
  void submit(uint64_t bytes, Task task) { submit(0, bytes, std::move(task)); }
  // Non-blocking: false (task untouched) when it does not fit now.
  bool trySubmit(uint64_t owner, uint64_t bytes, Task& task);
  bool trySubmit(uint64_t bytes, Task& task) { return trySubmit(0, bytes, task); }
  // Waits until every task submitted before the call has finished.
  void drain();

  uint64_t pendingBytes() const;  // queued + running
  uint64_t pendingTasks() const;  // queued + running
  uint64_t capacityBytes() const { return capacity_; }

 private:
  struct Item {
    uint64_t bytes;
    Task task;
    uint64_t seq = 0;  // submission order, for drain()
  };
  struct Owner {
    std::deque<Item> queue;
    uint64_t pending_bytes = 0;  // queued + running
  };
  void run();
  bool fits(uint64_t owner, uint64_t bytes) const REQUIRES(mu_);
  void enqueue(uint64_t owner, uint64_t bytes, Task task) REQUIRES(mu_);
  uint64_t oldestPending() const REQUIRES(mu_);  // next_seq_ when nothing pending

  const uint64_t capacity_;
  const uint64_t owner_capacity_;
  mutable Mutex mu_;
  CondVar work_cv_;                                   // a task arrived or stopping
  CondVar space_cv_;                                  // bytes freed / task finished
  std::map<uint64_t, Owner> owners_ GUARDED_BY(mu_);  // owners with pending bytes
  std::deque<uint64_t> ready_ GUARDED_BY(mu_);        // owners with queued tasks, in serving order
  uint64_t pending_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t pending_tasks_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  std::multiset<uint64_t> running_ GUARDED_BY(mu_);  // seqs of tasks being run
  std::vector<std::thread> threads_;
};

}  // namespace dumpd::storage
