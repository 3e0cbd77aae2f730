// A bounded queue (in bytes) in front of N writer threads.
//
// Thread-safety: every method may be called from any thread. Tasks run on pool threads in
// submission order per pool (FIFO hand-out); completion order across threads is not ordered,
// so callers that need in-order release track completion themselves.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace dumpd::storage {

class WriterPool {
 public:
  using Task = std::function<void()>;

  // REQUIRES: threads >= 1, capacity_bytes >= 1. `on_thread_start` (optional) runs first on
  // each pool thread (the daemon lowers their scheduling priority there).
  WriterPool(unsigned threads, uint64_t capacity_bytes,
             std::function<void()> on_thread_start = nullptr);
  // Runs every queued task, then joins the threads.
  ~WriterPool();
  WriterPool(const WriterPool&) = delete;
  WriterPool& operator=(const WriterPool&) = delete;

  // Blocks while the queue holds `bytes` or more of free capacity is missing; a task larger
  // than the whole capacity is admitted once the queue is empty (never deadlocks).
  void submit(uint64_t bytes, Task task);
  // Non-blocking: false (task untouched) when it does not fit now.
  bool trySubmit(uint64_t bytes, Task& task);
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
  void run();
  bool fits(uint64_t bytes) const;  // REQUIRES: mu_ held
  uint64_t oldestPending() const;   // REQUIRES: mu_ held; next_seq_ when nothing pending

  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // a task arrived or stopping
  std::condition_variable space_cv_;  // bytes freed / task finished
  std::deque<Item> queue_;
  uint64_t pending_bytes_ = 0;
  uint64_t pending_tasks_ = 0;
  bool stopping_ = false;
  uint64_t next_seq_ = 0;
  std::multiset<uint64_t> running_;  // seqs of tasks being run
  std::vector<std::thread> threads_;
};

}  // namespace dumpd::storage
