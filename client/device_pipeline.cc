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

constexpr uint64_t kStagingAlign = 256;  // copy engines like 256-byte aligned addresses
// Device memory for the statistics' scratch when device_staging_bytes is 0 (no snapshots):
// up to 80 KiB a tensor, so about a hundred large tensors' statistics in flight.
constexpr uint64_t kStatisticsOnlyStaging = 8ull << 20;
constexpr int kDestructorDrainMs = 10000;
// How often the issuer looks for the daemon's fetch request while records are held.
constexpr auto kFetchPoll = std::chrono::milliseconds(10);
// Counter words for one-kernel statistics per device: a word is reused once the record that
// last took it completed; with more statistics than that in flight, a pass takes two kernels.
constexpr uint64_t kCounterWords = 4096;
// Device-to-host bytes the issuer keeps enqueued (DUMPD_MAX_ISSUED_BYTES overrides it).
constexpr uint64_t kDefaultMaxIssuedBytes = 256ull << 20;

uint64_t maxIssuedBytes() {
  if (const char* v = std::getenv("DUMPD_MAX_ISSUED_BYTES"); v != nullptr && *v != '\0') {
    const unsigned long long n = std::strtoull(v, nullptr, 10);
    if (n > 0) return n;
  }
  return kDefaultMaxIssuedBytes;
}

uint64_t nanosSince(std::chrono::steady_clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t)
          .count());
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

Result<uint64_t> DevicePipeline::allocateStaging(DeviceState& dev, uint64_t bytes,
                                                 StreamHandle stream, uint64_t& end) {
  const uint64_t off = dev.head % dev.capacity;
  const uint64_t skip = off + bytes > dev.capacity ? dev.capacity - off : 0;
  const uint64_t need = skip + bytes;
  EventHandle wait_for = nullptr;
  {
    MutexLock lock(&mu_);
    while (dev.capacity - (dev.head - dev.tail) < need) {
      // The oldest region is still being read by a device-to-host copy: take it over, and
      // make the producer's stream wait for that copy (copies of one device run in order on
      // its copy stream, so waiting for the newest one taken over covers the older ones).
      // Its `done` event exists once the issuer enqueued the copy: wait for that. Meanwhile
      // the completion thread may free regions, this one included: look again after.
      const uint64_t oldest = dev.regions.front();
      if (entryLocked(oldest).hold == Hold::kFilling) {
        // A fetch is copying it out: wait for that (a trigger's rare, bounded pause).
        const auto waited_from = std::chrono::steady_clock::now();
        while (!dev.regions.empty() && dev.regions.front() == oldest &&
               entryLocked(oldest).hold == Hold::kFilling) {
          fill_cv_.wait(&mu_);
        }
        submit_wait_ns_ += nanosSince(waited_from);
        continue;
      }
      // A held snapshot no fetch asked for: the oldest gives way (training never waits for
      // the recorder).
      if (entryLocked(oldest).hold == Hold::kHeld) dropHeldLocked(entryLocked(oldest));
      if (!entryLocked(oldest).issued) {
        const auto waited_from = std::chrono::steady_clock::now();
        while (!dev.regions.empty() && dev.regions.front() == oldest &&
               !entryLocked(oldest).issued) {
          issued_cv_.wait(&mu_);
        }
        submit_wait_ns_ += nanosSince(waited_from);
        continue;
      }
      Entry& old = entryLocked(oldest);
      if (!old.completed) {
        wait_for = old.done;
        dev.guard_event = old.done;
        dev.guard_id = oldest;
      }
      dev.tail = old.staging_end;
      dev.guard_end = std::max(dev.guard_end, dev.tail);
      old.reclaimed = true;
      dev.regions.pop_front();
    }
    // The new region's memory held positions one lap earlier: [begin - capacity, end -
    // capacity). Where those reach below guard_end they are space another record's stream
    // took over, and a copy may still be reading it.
    const uint64_t begin = dev.head + skip;
    if (wait_for == nullptr && dev.guard_event != nullptr && begin < dev.guard_end + dev.capacity) {
      const bool done = dev.guard_id < front_id_ || entryLocked(dev.guard_id).completed;
      if (!done) wait_for = dev.guard_event;
    }
    if (begin + bytes >= dev.guard_end + dev.capacity) dev.guard_event = nullptr;  // handed out
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

uint32_t* DevicePipeline::takeCounter(DeviceState& dev) {
  if (dev.counters == nullptr ||
      dev.next_counter - dev.counters_released.load(std::memory_order_acquire) >= kCounterWords) {
    return nullptr;
  }
  return dev.counters + dev.next_counter++ % kCounterWords;
}

uint64_t DevicePipeline::stagingBytes(const DeviceCopy& c) const {
  const uint64_t scratch = ipc::alignUp(api_->statisticsScratchBytes(c.elements), kStagingAlign);
  if (c.statistics) return scratch;
  if (c.deferred) return ipc::alignUp(c.bytes, kStagingAlign) + scratch;
  return ipc::alignUp(c.bytes, kStagingAlign);
}

void* DevicePipeline::ringOnDevice(std::byte* ring_dst) const {
  return ring_device_base_ + (ring_dst - static_cast<std::byte*>(ring_.mappedBase()));
}

Status DevicePipeline::enqueueStaged(DeviceState& dev, StreamHandle stream,
                                     std::span<const DeviceCopy> copies, Entry& e) {
  uint64_t total = 0;
  for (const DeviceCopy& c : copies) total += stagingBytes(c);
  auto off = allocateStaging(dev, total, stream, e.staging_end);
  if (!off) return off.error();
  // The snapshot (or the statistics) on the producer's stream: ordered before anything it
  // runs later.
  std::byte* p = dev.staging + off.value();
  e.copies.clear();
  for (const DeviceCopy& c : copies) {
    if (c.statistics) {
      // Written by the kernel straight into the record: nothing for the issuer to copy.
      if (Status s = api_->statisticsAsync(ringOnDevice(c.ring_dst), p, takeCounter(dev),
                                           c.device_src, c.elements, c.dtype, stream);
          !s) {
        return s;
      }
    } else if (c.deferred) {
      // The snapshot stays in staging until a fetch; the statistics go to the record now
      // (the recorder's NaN/infinity check reads them).
      if (Status s = api_->snapshotAsync(p, c.device_src, c.bytes, stream); !s) return s;
      std::byte* scratch = p + ipc::alignUp(c.bytes, kStagingAlign);
      if (Status s =
              api_->statisticsAsync(ringOnDevice(c.ring_dst - ipc::kDeferredHeaderBytes), scratch,
                                    takeCounter(dev), c.device_src, c.elements, c.dtype, stream);
          !s) {
        return s;
      }
      e.held.push_back(DeviceCopy{c.ring_dst, p, c.bytes});
    } else {
      if (Status s = api_->snapshotAsync(p, c.device_src, c.bytes, stream); !s) return s;
      e.copies.push_back(DeviceCopy{c.ring_dst, p, c.bytes});
    }
    p += stagingBytes(c);
  }
  if (!e.held.empty()) e.hold = Hold::kHeld;
  if (e.copies.empty()) return api_->recordEvent(e.done, stream);  // nothing for the issuer
  auto snap = takeEvent();
  if (!snap) return snap.error();
  e.snap = snap.value();
  if (Status s = api_->recordEvent(e.snap, stream); !s) return s;
  e.issued = false;  // the issuer enqueues the device-to-host copies
  return {};
}

Status DevicePipeline::enqueueDirect(DeviceState& dev, StreamHandle stream,
                                     std::span<const DeviceCopy> copies, Entry& e) {
  uint64_t stats_total = 0;
  for (const DeviceCopy& c : copies) {
    if (c.statistics || c.deferred) {
      stats_total += ipc::alignUp(api_->statisticsScratchBytes(c.elements), kStagingAlign);
    }
  }
  std::byte* p = nullptr;
  if (stats_total != 0) {
    if (stats_total > dev.capacity) {
      return makeError(ErrorCode::kResourceExhausted,
                       "the statistics of one op need " + std::to_string(stats_total) +
                           " bytes of device staging; device_staging_bytes is " +
                           std::to_string(dev.capacity));
    }
    auto off = allocateStaging(dev, stats_total, stream, e.staging_end);
    if (!off) return off.error();
    p = dev.staging + off.value();
  }
  for (const DeviceCopy& c : copies) {
    if (c.statistics) {
      if (Status s = api_->statisticsAsync(ringOnDevice(c.ring_dst), p, takeCounter(dev),
                                           c.device_src, c.elements, c.dtype, stream);
          !s) {
        return s;
      }
      p += stagingBytes(c);
      continue;
    }
    if (Status s = api_->copyAsync(c.ring_dst, c.device_src, c.bytes, stream); !s) return s;
    if (c.deferred) {
      // Too large to hold: copied now, with the statistics the recorder's check reads.
      if (Status s =
              api_->statisticsAsync(ringOnDevice(c.ring_dst - ipc::kDeferredHeaderBytes), p,
                                    takeCounter(dev), c.device_src, c.elements, c.dtype, stream);
          !s) {
        return s;
      }
      p += ipc::alignUp(api_->statisticsScratchBytes(c.elements), kStagingAlign);
    }
  }
  if (Status s = api_->recordEvent(e.done, stream); !s) return s;
  // The daemon reads nothing of the record before it is committed, which is after `done`.
  std::vector<DeviceCopy> filled;
  for (const DeviceCopy& c : copies) {
    if (c.deferred) filled.push_back(c);
  }
  setDeferredState(filled, ipc::kDeferredFilled);
  return {};
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
