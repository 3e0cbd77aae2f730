#include "client/device_pipeline.h"

#include <chrono>

#include "ipc/ring_format.h"

namespace dumpd::client {
namespace {

constexpr uint64_t kStagingAlign = 256;  // copy engines like 256-byte aligned addresses
constexpr int kDestructorDrainMs = 10000;

// Restores the producer's current device when a submit returns.
class DeviceGuard {
 public:
  DeviceGuard(DeviceApi& api, int device) : api_(api) {
    auto prev = api.setDevice(device);
    if (prev) {
      prev_ = prev.value();
      status_ = {};
    } else {
      status_ = prev.error();
    }
  }
  ~DeviceGuard() {
    if (status_ && prev_ >= 0) (void)api_.setDevice(prev_);
  }
  const Status& status() const { return status_; }

 private:
  DeviceApi& api_;
  int prev_ = -1;
  Status status_;
};

}  // namespace

struct DevicePipeline::DeviceState {
  int device = 0;
  StreamHandle copy_stream = nullptr;
  EventHandle snapshot = nullptr;  // re-recorded per record; waits capture it at call time
  std::byte* staging = nullptr;
  uint64_t capacity = 0;
  uint64_t head = 0;  // producer thread: end of the newest staging region
  // Guarded by mu_: start of the oldest region still in use, and the ids of the entries
  // owning regions, oldest first.
  uint64_t tail = 0;
  std::deque<uint64_t> regions;
};

DevicePipeline::DevicePipeline(std::shared_ptr<DeviceApi> api, ipc::RingProducer& ring,
                               uint64_t staging_bytes)
    : api_(std::move(api)), ring_(ring), staging_bytes_(staging_bytes) {
  completion_ = std::thread([this] { completionLoop(); });
}

DevicePipeline::~DevicePipeline() {
  const bool drained = drain(kDestructorDrainMs).has_value() || inFlight() == 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  completion_.join();
  // Copies still in flight (a hung device) may write into staging and the ring: then leak
  // them rather than free memory a copy engine still uses.
  if (!drained) return;
  for (auto& [device, dev] : devices_) {
    DeviceGuard guard(*api_, device);
    if (dev->staging != nullptr) api_->free(dev->staging);
    if (dev->snapshot != nullptr) api_->destroyEvent(dev->snapshot);
    if (dev->copy_stream != nullptr) api_->destroyStream(dev->copy_stream);
  }
  for (EventHandle e : free_events_) api_->destroyEvent(e);
  if (ring_pinned_) api_->unregisterHost(ring_.mappedBase());
}

Status DevicePipeline::pinRing() {
  if (ring_pinned_) return {};
  if (Status s = api_->registerHost(ring_.mappedBase(), ring_.mappedBytes()); !s) return s;
  ring_pinned_ = true;
  return {};
}

Result<DevicePipeline::DeviceState*> DevicePipeline::stateFor(int device) {
  if (auto it = devices_.find(device); it != devices_.end()) return it->second.get();
  auto count = api_->deviceCount();
  if (!count) return count.error();
  if (device < 0 || device >= count.value()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "tensor on " + api_->name() + " device " + std::to_string(device) + ", but " +
                         std::to_string(count.value()) + " device(s) are visible");
  }
  if (Status s = pinRing(); !s) return s.error();
  auto dev = std::make_unique<DeviceState>();
  dev->device = device;
  auto stream = api_->createStream();
  if (!stream) return stream.error();
  dev->copy_stream = stream.value();
  auto snap = api_->createEvent(false);
  if (!snap) return snap.error();
  dev->snapshot = snap.value();
  if (staging_bytes_ != 0) {
    const uint64_t capacity = staging_bytes_ / kStagingAlign * kStagingAlign;
    auto mem = api_->allocate(capacity);
    if (!mem) {
      return makeError(mem.error().code, "cannot allocate " + std::to_string(capacity) +
                                             " bytes of device staging on device " +
                                             std::to_string(device) +
                                             " (device_staging_bytes): " + mem.error().message);
    }
    dev->staging = static_cast<std::byte*>(mem.value());
    dev->capacity = capacity;
  }
  DeviceState* raw = dev.get();
  devices_.emplace(device, std::move(dev));
  return raw;
}

Result<EventHandle> DevicePipeline::takeEvent() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_events_.empty()) {
      EventHandle e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
  }
  return api_->createEvent(true);
}

Result<uint64_t> DevicePipeline::allocateStaging(DeviceState& dev, uint64_t bytes,
                                                 StreamHandle stream, uint64_t& end) {
  const uint64_t off = dev.head % dev.capacity;
  const uint64_t skip = off + bytes > dev.capacity ? dev.capacity - off : 0;
  const uint64_t need = skip + bytes;
  EventHandle wait_for = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (dev.capacity - (dev.head - dev.tail) < need) {
      // The oldest region is still being read by a device-to-host copy: take it over, and
      // make the producer's stream wait for that copy (copies of one device run in order on
      // its copy stream, so waiting for the newest one taken over covers the older ones).
      Entry& old = entryLocked(dev.regions.front());
      if (!old.completed) wait_for = old.done;
      dev.tail = old.staging_end;
      old.reclaimed = true;
      dev.regions.pop_front();
    }
    // Entries popped here return their events to the pool; wait_for is not among them (its
    // entry has not completed), and only this thread takes events from the pool.
    popFinishedLocked();
    if (wait_for != nullptr) ++counters_.staging_waits;
  }
  if (wait_for != nullptr) {
    if (Status s = api_->streamWaitEvent(stream, wait_for); !s) return s.error();
  }
  const uint64_t begin = dev.head + skip;
  dev.head = begin + bytes;
  end = dev.head;
  return begin % dev.capacity;
}

Status DevicePipeline::enqueueStaged(DeviceState& dev, StreamHandle stream,
                                     std::span<const DeviceCopy> copies, EventHandle done,
                                     uint64_t& staging_end) {
  uint64_t total = 0;
  for (const DeviceCopy& c : copies) total += ipc::alignUp(c.bytes, kStagingAlign);
  auto off = allocateStaging(dev, total, stream, staging_end);
  if (!off) return off.error();
  // 1. Snapshot on the producer's stream: ordered before anything it runs later.
  std::byte* p = dev.staging + off.value();
  for (const DeviceCopy& c : copies) {
    if (Status s = api_->copyAsync(p, c.device_src, c.bytes, stream); !s) return s;
    p += ipc::alignUp(c.bytes, kStagingAlign);
  }
  if (Status s = api_->recordEvent(dev.snapshot, stream); !s) return s;
  // 2. Device to host on our copy stream, after the snapshot.
  if (Status s = api_->streamWaitEvent(dev.copy_stream, dev.snapshot); !s) return s;
  p = dev.staging + off.value();
  for (const DeviceCopy& c : copies) {
    if (Status s = api_->copyAsync(c.ring_dst, p, c.bytes, dev.copy_stream); !s) return s;
    p += ipc::alignUp(c.bytes, kStagingAlign);
  }
  return api_->recordEvent(done, dev.copy_stream);
}

Status DevicePipeline::prepare(int device) {
  DeviceGuard guard(*api_, device);
  if (!guard.status()) return guard.status();
  auto st = stateFor(device);
  if (!st) return st.error();
  return {};
}

Status DevicePipeline::submit(uint64_t sequence, int device, StreamHandle stream,
                              std::span<const DeviceCopy> copies, uint32_t tensors) {
  // Nothing enqueued yet: the record is voided at once (published in its turn).
  const auto give_up = [&](Error e) -> Status {
    ring_.voidRecord(sequence, tensors);
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.failed_records;
    return e;
  };
  if (std::string sticky = error(); !sticky.empty()) {
    return give_up(makeError(ErrorCode::kIo, sticky));
  }
  DeviceGuard guard(*api_, device);
  if (!guard.status()) return give_up(guard.status().error());
  auto st = stateFor(device);
  if (!st) return give_up(st.error());
  DeviceState& dev = *st.value();
  auto done = takeEvent();
  if (!done) return give_up(done.error());

  uint64_t total = 0;
  for (const DeviceCopy& c : copies) total += ipc::alignUp(c.bytes, kStagingAlign);
  Entry e;
  e.sequence = sequence;
  e.dev = &dev;
  e.done = done.value();
  e.tensors = tensors;
  const bool staged = dev.capacity != 0 && total <= dev.capacity;
  Status s;
  if (staged) {
    s = enqueueStaged(dev, stream, copies, e.done, e.staging_end);
  } else {
    for (const DeviceCopy& c : copies) {
      if (s = api_->copyAsync(c.ring_dst, c.device_src, c.bytes, stream); !s) break;
    }
    if (s) s = api_->recordEvent(e.done, stream);
  }
  e.reclaimed = e.staging_end == 0;  // 0: no staging region was taken
  std::lock_guard<std::mutex> lock(mu_);
  ++counters_.records;
  ++(staged ? counters_.staged_records : counters_.direct_records);
  if (!s) {
    // Copies already enqueued may still write into the record: the completion thread waits
    // for what was recorded, then voids it. (CUDA errors are sticky: nothing more runs.)
    noteErrorLocked(s.error().message);
    e.failed = true;
  }
  const uint64_t id = front_id_ + entries_.size();
  entries_.push_back(e);
  if (e.staging_end != 0) dev.regions.push_back(id);
  work_cv_.notify_one();
  return s;
}

void DevicePipeline::completionLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || next_complete_ < front_id_ + entries_.size(); });
    if (next_complete_ == front_id_ + entries_.size()) return;  // stop_, nothing left
    const uint64_t id = next_complete_;
    EventHandle done = entryLocked(id).done;
    lock.unlock();
    // Waits for a failed record too: copies enqueued before the failure still write into it.
    const Status s = api_->waitEvent(done);
    lock.lock();
    Entry& e = entryLocked(id);
    e.completed = true;
    if (!s) noteErrorLocked(s.error().message);
    if (!s || e.failed) {
      e.failed = true;
      ++counters_.failed_records;
      ring_.voidRecord(e.sequence, e.tensors);
    } else {
      ring_.commit(e.sequence);
    }
    // Staging of this device freed in order: regions whose copies completed.
    DeviceState& dev = *e.dev;
    while (!dev.regions.empty()) {
      Entry& old = entryLocked(dev.regions.front());
      if (!old.completed) break;
      dev.tail = old.staging_end;
      old.reclaimed = true;
      dev.regions.pop_front();
    }
    ++next_complete_;
    popFinishedLocked();
    done_cv_.notify_all();
  }
}

void DevicePipeline::popFinishedLocked() {
  while (!entries_.empty() && entries_.front().completed && entries_.front().reclaimed) {
    free_events_.push_back(entries_.front().done);
    entries_.pop_front();
    ++front_id_;
  }
}

void DevicePipeline::noteErrorLocked(const std::string& message) {
  if (error_.empty()) error_ = api_->name() + " copy failed: " + message;
}

Status DevicePipeline::drain(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto all_done = [&] { return next_complete_ == front_id_ + entries_.size(); };
  if (timeout_ms < 0) {
    done_cv_.wait(lock, all_done);
  } else if (!done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), all_done)) {
    return makeError(ErrorCode::kTimeout,
                     std::to_string(front_id_ + entries_.size() - next_complete_) +
                         " device copies still in flight after " + std::to_string(timeout_ms) +
                         " ms");
  }
  if (!error_.empty()) return makeError(ErrorCode::kIo, error_);
  return {};
}

size_t DevicePipeline::inFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return front_id_ + entries_.size() - next_complete_;
}

PipelineCounters DevicePipeline::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

std::string DevicePipeline::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

}  // namespace dumpd::client
