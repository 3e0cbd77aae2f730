#include "storage/writer/writer_pool.h"

#include <algorithm>

namespace dumpd::storage {

WriterPool::WriterPool(unsigned threads, uint64_t capacity_bytes,
                       std::function<void()> on_thread_start, uint64_t owner_capacity_bytes)
    : capacity_(std::max<uint64_t>(capacity_bytes, 1)),
      owner_capacity_(owner_capacity_bytes == 0 ? capacity_ : owner_capacity_bytes) {
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
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.signalAll();
  for (std::thread& t : threads_) t.join();
}

bool WriterPool::fits(uint64_t owner, uint64_t bytes) const {
  // An empty pool (owner) admits anything: a task larger than a capacity must not wait
  // forever.
  const auto it = owners_.find(owner);
  const uint64_t mine = it == owners_.end() ? 0 : it->second.pending_bytes;
  return (pending_bytes_ == 0 || pending_bytes_ + bytes <= capacity_) &&
         (mine == 0 || mine + bytes <= owner_capacity_);
}

uint64_t WriterPool::oldestPending() const {
  uint64_t oldest = next_seq_;
  if (!running_.empty()) oldest = std::min(oldest, *running_.begin());
  for (const auto& [id, o] : owners_) {
    if (!o.queue.empty()) oldest = std::min(oldest, o.queue.front().seq);
  }
  return oldest;
}

void WriterPool::enqueue(uint64_t owner, uint64_t bytes, Task task) {
  Owner& o = owners_[owner];
  if (o.queue.empty()) ready_.push_back(owner);
  o.queue.push_back(Item{bytes, std::move(task), next_seq_++});
  o.pending_bytes += bytes;
  pending_bytes_ += bytes;
  ++pending_tasks_;
}

void WriterPool::submit(uint64_t owner, uint64_t bytes, Task task) {
  {
    MutexLock lock(&mu_);
    while (!fits(owner, bytes)) space_cv_.wait(&mu_);
    enqueue(owner, bytes, std::move(task));
  }
  work_cv_.signal();
}

bool WriterPool::trySubmit(uint64_t owner, uint64_t bytes, Task& task) {
  {
    MutexLock lock(&mu_);
    if (!fits(owner, bytes)) return false;
    enqueue(owner, bytes, std::move(task));
  }
  work_cv_.signal();
  return true;
}

void WriterPool::drain() {
  MutexLock lock(&mu_);
  const uint64_t target = next_seq_;
  while (oldestPending() < target) space_cv_.wait(&mu_);
}

uint64_t WriterPool::pendingBytes() const {
  MutexLock lock(&mu_);
  return pending_bytes_;
}

uint64_t WriterPool::pendingTasks() const {
  MutexLock lock(&mu_);
  return pending_tasks_;
}

void WriterPool::run() {
  MutexLock lock(&mu_);
  while (true) {
    while (!stopping_ && ready_.empty()) work_cv_.wait(&mu_);
    if (ready_.empty()) return;  // stopping, and every queued task has run
    // Round robin: the owner at the front gives one task and goes to the back if it has more.
    const uint64_t owner = ready_.front();
    ready_.pop_front();
    Owner& o = owners_[owner];
    Item item = std::move(o.queue.front());
    o.queue.pop_front();
    if (!o.queue.empty()) ready_.push_back(owner);
    auto running = running_.insert(item.seq);
    lock.unlock();
    item.task();
    item.task = nullptr;  // destroy captures outside the lock
    lock.lock();
    running_.erase(running);
    Owner& after = owners_[owner];
    after.pending_bytes -= item.bytes;
    if (after.pending_bytes == 0 && after.queue.empty()) owners_.erase(owner);
    pending_bytes_ -= item.bytes;
    --pending_tasks_;
    space_cv_.signalAll();
  }
}

}  // namespace dumpd::storage
