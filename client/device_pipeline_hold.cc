// DevicePipeline's deferred records (docs/recorder.md, "Keeping CUDA tensors on the device"):
// held staging regions given up for space, and the fetch that copies them into their records.
#include <algorithm>
#include <atomic>
#include <vector>

#include "client/device_pipeline.h"
#include "client/device_pipeline_state.h"
#include "ipc/ring_format.h"

namespace dumpd::client {

void DevicePipeline::setDeferredState(const std::vector<DeviceCopy>& copies, uint64_t state) {
  for (const DeviceCopy& c : copies) {
    auto* header = reinterpret_cast<ipc::DeferredPayload*>(c.ring_dst - ipc::kDeferredHeaderBytes);
    std::atomic_ref<uint64_t>(header->state).store(state, std::memory_order_release);
  }
}

void DevicePipeline::releaseHoldLocked(Entry& e) {
  e.hold = Hold::kReleased;
  e.held.clear();
  --held_;
}

void DevicePipeline::dropHeldLocked(Entry& e) {
  ++counters_.deferred_dropped;
  // Tell the daemon, unless it released the record already (it discarded its iteration):
  // that ring space is the producer's again, and this is the producer's thread, which has
  // not reserved since it looked.
  if (ring_.control()->tail.load(std::memory_order_acquire) < e.ring_end) {
    setDeferredState(e.held, ipc::kDeferredLost);
  }
  releaseHoldLocked(e);
}

bool DevicePipeline::fetchDueLocked() {
  const ipc::RingControl* ctl = ring_.control();
  // A seqlock (RingConsumer::requestFetch): an odd generation is being written; the fields
  // are taken only when the generation is even and the same before and after them.
  const uint32_t generation = ctl->fetch_generation.load(std::memory_order_acquire);
  if (generation != fetch_generation_ && generation % 2 == 0) {
    const uint32_t through = ctl->fetch_through_iteration.load(std::memory_order_relaxed);
    const uint64_t from = ctl->fetch_from_sequence.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (ctl->fetch_generation.load(std::memory_order_relaxed) == generation) {
      fetch_generation_ = generation;
      fetch_through_ = through;
      fetch_from_ = from;
      fill_due_ = true;
    }
  }
  return fill_due_;
}

bool DevicePipeline::fillLocked(int& current) {
  fill_due_ = false;
  struct Job {
    uint64_t id;
    DeviceState* dev;
    std::vector<DeviceCopy> held;
  };
  std::vector<Job> jobs;
  bool waiting = false;  // covered records whose snapshot has not completed yet
  for (uint64_t id = front_id_; id < front_id_ + entries_.size(); ++id) {
    Entry& e = entryLocked(id);
    if (e.hold != Hold::kHeld || !fetchCoversLocked(e)) continue;
    if (!e.completed) {
      // Filled once committed: a record whose snapshot fails is voided, and the daemon
      // releases a void record at once; nothing may be copied into it.
      waiting = true;
      continue;
    }
    e.hold = Hold::kFilling;  // neither dropped nor reclaimed meanwhile
    jobs.push_back(Job{id, e.dev, e.held});
  }
  fill_due_ = waiting;
  if (jobs.empty()) return waiting;
  mu_.unlock();
  // Each device's copies queue on its copy stream (the snapshots completed); one event after
  // them per device, then wait for all, even after an error: no copy may still be running
  // when its record is marked and its staging reused.
  Status s;
  std::vector<DeviceState*> used;
  for (const Job& j : jobs) {
    if (!s) break;
    if (current != j.dev->device) {
      auto prev = api_->setDevice(j.dev->device);
      if (!prev) s = prev.error();
      current = j.dev->device;
    }
    if (s && j.dev->fill_event == nullptr) {
      auto ev = api_->createEvent(true);
      if (ev) {
        j.dev->fill_event = ev.value();
      } else {
        s = ev.error();
      }
    }
    if (!s) break;
    if (std::find(used.begin(), used.end(), j.dev) == used.end()) used.push_back(j.dev);
    for (const DeviceCopy& c : j.held) {
      if (!s) break;
      s = api_->copyAsync(c.ring_dst, c.device_src, c.bytes, j.dev->copy_stream);
    }
  }
  for (DeviceState* dev : used) {
    auto prev = api_->setDevice(dev->device);
    Status w = prev ? Status() : Status(prev.error());
    current = dev->device;
    if (w) w = api_->recordEvent(dev->fill_event, dev->copy_stream);
    if (w) w = api_->waitEvent(dev->fill_event);
    if (s && !w) s = w;
  }
  mu_.lock();
  if (!s) noteErrorLocked(s.error().message);
  // All copies completed before any record is marked: the daemon writes (and then releases)
  // a record only once marked, so no copy can land in ring space it gave back.
  for (const Job& j : jobs) {
    Entry& e = entryLocked(j.id);
    setDeferredState(e.held, s ? ipc::kDeferredFilled : ipc::kDeferredLost);
    ++(s ? counters_.deferred_filled : counters_.deferred_dropped);
    releaseHoldLocked(e);
    reclaimLocked(*e.dev);
  }
  // The daemon waits for these (a fetch): wake it rather than leave it to its next look.
  if (!jobs.empty()) ring_.wakeConsumer();
  popFinishedLocked();
  fill_cv_.signalAll();
  work_cv_.signal();
  return waiting;
}

}  // namespace dumpd::client
