#include "storage/writer_pool.h"

#include <algorithm>

namespace dumpd::storage {

WriterPool::WriterPool(unsigned threads, uint64_t capacity_bytes,
                       std::function<void()> on_thread_start)
    : capacity_(std::max<uint64_t>(capacity_bytes, 1)) {
  threads = std::max(threads, 1u);
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) {
    threads_.emplace_back([this, on_thread_start] {
      if (on_thread_start) on_thread_start();
      run();
    });
  }
}

WriterPool::~WriterPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool WriterPool::fits(uint64_t bytes) const {
  // An empty queue admits anything: a task larger than the capacity must not wait forever.
  return pending_bytes_ == 0 || pending_bytes_ + bytes <= capacity_;
}

uint64_t WriterPool::oldestPending() const {
  uint64_t oldest = next_seq_;
  if (!running_.empty()) oldest = std::min(oldest, *running_.begin());
  if (!queue_.empty()) oldest = std::min(oldest, queue_.front().seq);
  return oldest;
}

void WriterPool::submit(uint64_t bytes, Task task) {
  {
    std::unique_lock lock(mu_);
    space_cv_.wait(lock, [&] { return fits(bytes); });
    queue_.push_back(Item{bytes, std::move(task), next_seq_++});
    pending_bytes_ += bytes;
    ++pending_tasks_;
  }
  work_cv_.notify_one();
}

bool WriterPool::trySubmit(uint64_t bytes, Task& task) {
  {
    std::lock_guard lock(mu_);
    if (!fits(bytes)) return false;
    queue_.push_back(Item{bytes, std::move(task), next_seq_++});
    pending_bytes_ += bytes;
    ++pending_tasks_;
  }
  work_cv_.notify_one();
  return true;
}

void WriterPool::drain() {
  std::unique_lock lock(mu_);
  const uint64_t target = next_seq_;
  space_cv_.wait(lock, [&] { return oldestPending() >= target; });
}

uint64_t WriterPool::pendingBytes() const {
  std::lock_guard lock(mu_);
  return pending_bytes_;
}

uint64_t WriterPool::pendingTasks() const {
  std::lock_guard lock(mu_);
  return pending_tasks_;
}

void WriterPool::run() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every queued task has run
    Item item = std::move(queue_.front());
    queue_.pop_front();
    auto running = running_.insert(item.seq);
    lock.unlock();
    item.task();
    item.task = nullptr;  // destroy captures outside the lock
    lock.lock();
    running_.erase(running);
    pending_bytes_ -= item.bytes;
    --pending_tasks_;
    space_cv_.notify_all();
  }
}

}  // namespace dumpd::storage
