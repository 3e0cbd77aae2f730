#include "client/device_pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>

#include "base/thread_name.h"
#include "client/device_pipeline_state.h"
#include "ipc/ring_format.h"

namespace dumpd::client {
namespace {

// Device memory for the statistics' scratch when device_staging_bytes is 0 (no snapshots):
// up to 80 KiB a tensor, so about a hundred large tensors' statistics in flight.
constexpr uint64_t kStatisticsOnlyStaging = 8ull << 20;
constexpr int kDestructorDrainMs = 10000;
// How often the issuer looks for the daemon's fetch request while records are held.
constexpr auto kFetchPoll = std::chrono::milliseconds(10);
// Device-to-host bytes the issuer keeps enqueued (DUMPD_MAX_ISSUED_BYTES overrides it).
constexpr uint64_t kDefaultMaxIssuedBytes = 256ull << 20;

uint64_t maxIssuedBytes() {
  if (const char* v = std::getenv("DUMPD_MAX_ISSUED_BYTES"); v != nullptr && *v != '\0') {
    const unsigned long long n = std::strtoull(v, nullptr, 10);
    if (n > 0) return n;
  }
  return kDefaultMaxIssuedBytes;
}

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

DevicePipeline::DevicePipeline(std::shared_ptr<DeviceApi> api, ipc::RingProducer& ring,
                               uint64_t staging_bytes)
    : api_(std::move(api)),
      ring_(ring),
      staging_bytes_(staging_bytes),
      max_issued_bytes_(maxIssuedBytes()) {
  completion_ = std::thread([this] {
    setThreadName("dumpd-complete");
    completionLoop();
  });
  issuer_ = std::thread([this] {
    setThreadName("dumpd-issuer");
    issuerLoop();
  });
}

DevicePipeline::~DevicePipeline() {
  const bool drained = drain(kDestructorDrainMs).has_value() || inFlight() == 0;
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.signalAll();
  issue_cv_.signalAll();
  issue_space_cv_.signalAll();
  issuer_.join();
  completion_.join();
  // Copies still in flight (a hung device) may write into staging and the ring: then leak
  // them rather than free memory a copy engine still uses.
  if (!drained) return;
  for (auto& [device, dev] : devices_) {
    DeviceGuard guard(*api_, device);
    if (dev->staging != nullptr) api_->free(dev->staging);
    if (dev->counters != nullptr) api_->free(dev->counters);
    if (dev->fill_event != nullptr) api_->destroyEvent(dev->fill_event);
    if (dev->copy_stream != nullptr) api_->destroyStream(dev->copy_stream);
  }
  for (EventHandle e : free_events_) api_->destroyEvent(e);
  if (ring_pinned_) api_->unregisterHost(ring_.mappedBase());
}

Status DevicePipeline::pinRing() {
  if (ring_pinned_) return {};
  if (Status s = api_->registerHost(ring_.mappedBase(), ring_.mappedBytes()); !s) return s;
  ring_pinned_ = true;
  auto device = api_->hostDevicePointer(ring_.mappedBase());
  if (!device) return device.error();
  ring_device_base_ = static_cast<std::byte*>(device.value());
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
  {
    const uint64_t capacity = staging_bytes_ != 0 ? staging_bytes_ / kStagingAlign * kStagingAlign
                                                  : kStatisticsOnlyStaging;
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
  // Without counters every statistics pass takes two kernels: slower, not wrong.
  if (auto counters = api_->counterWords(kCounterWords); counters) {
    dev->counters = counters.value();
  }
  DeviceState* raw = dev.get();
  devices_.emplace(device, std::move(dev));
  return raw;
}

Result<EventHandle> DevicePipeline::takeEvent() {
  {
    MutexLock lock(&mu_);
    if (!free_events_.empty()) {
      EventHandle e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
  }
  return api_->createEvent(true);
}

Status DevicePipeline::prepare(int device) {
  DeviceGuard guard(*api_, device);
  if (!guard.status()) return guard.status();
  auto st = stateFor(device);
  if (!st) return st.error();
  return {};
}

Status DevicePipeline::submit(uint64_t sequence, int device, StreamHandle stream,
                              std::span<const DeviceCopy> copies, uint32_t tensors,
                              uint32_t iteration, uint64_t ring_end) {
  const auto submit_start = std::chrono::steady_clock::now();
  submit_wait_ns_ = 0;
  // Nothing enqueued yet: the record is voided at once (published in its turn).
  const auto give_up = [&](Error e) -> Status {
    ring_.voidRecord(sequence, tensors);
    MutexLock lock(&mu_);
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
  bool only_statistics = true;
  uint64_t statistics = 0;
  for (const DeviceCopy& c : copies) {
    total += stagingBytes(c);
    only_statistics = only_statistics && c.statistics;
    statistics += c.statistics ? 1 : 0;
  }
  Entry e;
  e.sequence = sequence;
  e.dev = &dev;
  e.done = done.value();
  e.tensors = tensors;
  e.iteration = iteration;
  e.ring_end = ring_end;
  // Snapshots need device_staging_bytes; statistics fit in the small area kept without it.
  const bool staged = total <= dev.capacity && (staging_bytes_ != 0 || only_statistics);
  const auto enqueue_start = std::chrono::steady_clock::now();
  const Status s =
      staged ? enqueueStaged(dev, stream, copies, e) : enqueueDirect(dev, stream, copies, e);
  e.reclaimed = e.staging_end == 0;  // 0: no staging region was taken
  e.counter_end = dev.next_counter;
  // Kernels and copies enqueued before a failure write into the record (statistics and
  // direct copies target the ring itself): `done` after them lets the completion thread wait
  // for them before the record is voided and its ring space reused. (Best effort: after a
  // sticky device error nothing more runs.)
  if (!s) (void)api_->recordEvent(e.done, stream);
  const uint64_t enqueue_ns = nanosSince(enqueue_start);
  const uint64_t submit_ns = nanosSince(submit_start);
  MutexLock lock(&mu_);
  counters_.submit_ns += submit_ns;
  counters_.wait_ns += submit_wait_ns_;
  counters_.enqueue_ns += enqueue_ns - std::min(enqueue_ns, submit_wait_ns_);
  ++counters_.records;
  counters_.statistics += statistics;
  ++(staged ? counters_.staged_records : counters_.direct_records);
  if (!s) {
    // Copies already enqueued may still write into the record: the completion thread waits
    // for what was recorded, then voids it. (CUDA errors are sticky: nothing more runs.)
    noteErrorLocked(s.error().message);
    e.failed = true;
    e.issued = true;
    e.hold = e.hold == Hold::kHeld ? Hold::kReleased : e.hold;
  }
  bool wake_issuer = false;
  if (e.hold == Hold::kHeld) {
    // The first held record: the issuer starts looking for fetches.
    ++counters_.deferred_records;
    wake_issuer = ++held_ == 1;
    // A fetch already covers it (reserved before the producer saw the request): copy soon.
    if (fetchCoversLocked(e)) fill_due_ = true;
  }
  const uint64_t id = front_id_ + entries_.size();
  const bool to_issue = !e.issued || fill_due_ || wake_issuer;
  entries_.push_back(std::move(e));
  if (entries_.back().staging_end != 0) dev.regions.push_back(id);
  if (to_issue) issue_cv_.signal();
  work_cv_.signal();
  return s;
}

void DevicePipeline::completionLoop() {
  MutexLock lock(&mu_);
  for (;;) {
    for (;;) {
      const bool have = next_complete_ < front_id_ + entries_.size();
      if ((have && entryLocked(next_complete_).issued) || (stop_ && !have)) break;
      work_cv_.wait(&mu_);
    }
    if (next_complete_ == front_id_ + entries_.size()) return;  // stop_, nothing left
    const uint64_t id = next_complete_;
    EventHandle done = entryLocked(id).done;
    lock.unlock();
    // Waits for a failed record too: copies enqueued before the failure still write into it.
    const Status s = api_->waitEvent(done);
    lock.lock();
    Entry& e = entryLocked(id);
    e.completed = true;
    // Its kernels ran: the counters it took are free (records complete in order).
    e.dev->counters_released.store(e.counter_end, std::memory_order_release);
    if (e.issued_bytes != 0) {
      issued_bytes_ -= e.issued_bytes;
      issue_space_cv_.signal();
    }
    if (!s) noteErrorLocked(s.error().message);
    if (!s || e.failed) {
      e.failed = true;
      if (e.hold == Hold::kHeld) releaseHoldLocked(e);  // nothing to fetch
      ++counters_.failed_records;
      ring_.voidRecord(e.sequence, e.tensors);
    } else {
      ring_.commit(e.sequence);
      // A fetch that covers it was waiting for this commit.
      if (e.hold == Hold::kHeld && fill_due_) issue_cv_.signal();
    }
    // Staging of this device freed in order: regions whose copies completed.
    reclaimLocked(*e.dev);
    ++next_complete_;
    popFinishedLocked();
    done_cv_.signalAll();
  }
}

void DevicePipeline::issuerLoop() {
  MutexLock lock(&mu_);
  int current = -1;
  for (;;) {
    // Entries up to next_issue_ that were issued at submit (direct, failed) are skipped.
    while (next_issue_ < front_id_ + entries_.size() &&
           (next_issue_ < front_id_ || entryLocked(next_issue_).issued)) {
      ++next_issue_;
    }
    // A fetch first; covered records still in flight are retried after a poll (issuing
    // other records meanwhile: their copies may be what a mixed record waits for).
    bool fill_waiting = false;
    if (fetchDueLocked()) {
      fill_waiting = fillLocked(current);
      if (!fill_waiting) continue;
    }
    if (next_issue_ == front_id_ + entries_.size()) {
      if (stop_) return;
      if (held_ == 0 && !fill_waiting) {
        issue_cv_.wait(&mu_);
      } else {
        // Records are held: look for the daemon's fetch request now and then.
        issue_cv_.waitUntil(&mu_, std::chrono::steady_clock::now() + kFetchPoll);
      }
      continue;
    }
    uint64_t bytes = 0;
    for (const DeviceCopy& c : entryLocked(next_issue_).copies) bytes += c.bytes;
    if (issued_bytes_ != 0 && issued_bytes_ + bytes > max_issued_bytes_) {
      while (issued_bytes_ != 0 && issued_bytes_ + bytes > max_issued_bytes_) {
        issue_space_cv_.wait(&mu_);
      }
      continue;  // entries may have moved: look again
    }
    issued_bytes_ += bytes;
    Entry& e = entryLocked(next_issue_);
    e.issued_bytes = bytes;
    DeviceState& dev = *e.dev;
    const std::vector<DeviceCopy> copies = e.copies;
    const EventHandle snap = e.snap;
    const EventHandle done = e.done;
    const uint64_t id = next_issue_;
    lock.unlock();
    // Enqueueing may block while the device's queue is full: only this thread waits.
    Status s;
    if (current != dev.device) {
      auto prev = api_->setDevice(dev.device);
      s = prev ? Status() : Status(prev.error());
      current = dev.device;
    }
    if (s) s = api_->streamWaitEvent(dev.copy_stream, snap);
    for (const DeviceCopy& c : copies) {
      if (!s) break;
      s = api_->copyAsync(c.ring_dst, c.device_src, c.bytes, dev.copy_stream);
    }
    if (s) s = api_->recordEvent(done, dev.copy_stream);
    lock.lock();
    Entry& after = entryLocked(id);
    if (!s) {
      noteErrorLocked(s.error().message);
      after.failed = true;
    }
    after.issued = true;
    after.copies.clear();
    ++next_issue_;
    issued_cv_.signalAll();
    work_cv_.signal();
  }
}

void DevicePipeline::reclaimLocked(DeviceState& dev) {
  while (!dev.regions.empty()) {
    Entry& old = entryLocked(dev.regions.front());
    if (!old.completed || old.hold == Hold::kHeld || old.hold == Hold::kFilling) break;
    dev.tail = old.staging_end;
    old.reclaimed = true;
    dev.regions.pop_front();
  }
}

void DevicePipeline::popFinishedLocked() {
  while (!entries_.empty() && entries_.front().completed && entries_.front().reclaimed) {
    free_events_.push_back(entries_.front().done);
    if (entries_.front().snap != nullptr) free_events_.push_back(entries_.front().snap);
    entries_.pop_front();
    ++front_id_;
  }
}

void DevicePipeline::noteErrorLocked(const std::string& message) {
  if (error_.empty()) error_ = api_->name() + " copy failed: " + message;
}

Status DevicePipeline::drain(int timeout_ms) {
  MutexLock lock(&mu_);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  while (next_complete_ != front_id_ + entries_.size()) {
    if (timeout_ms < 0) {
      done_cv_.wait(&mu_);
      continue;
    }
    if (done_cv_.waitUntil(&mu_, deadline) || next_complete_ == front_id_ + entries_.size())
      continue;
    return makeError(ErrorCode::kTimeout,
                     std::to_string(front_id_ + entries_.size() - next_complete_) +
                         " device copies still in flight after " + std::to_string(timeout_ms) +
                         " ms");
  }
  if (!error_.empty()) return makeError(ErrorCode::kIo, error_);
  return {};
}

size_t DevicePipeline::inFlight() const {
  MutexLock lock(&mu_);
  return front_id_ + entries_.size() - next_complete_;
}

PipelineCounters DevicePipeline::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

std::string DevicePipeline::error() const {
  MutexLock lock(&mu_);
  return error_;
}

}  // namespace dumpd::client
