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

void DevicePipeline::dropHeldLocked(Entry& e) {
  e.hold = Hold::kReleased;
  ++counters_.deferred_dropped;
  // Tell the daemon, unless it released the record already (it discarded its iteration):
  // that ring space is the producer's again, and this is the producer's thread, which has
  // not reserved since it looked.
  if (ring_.control()->tail.load(std::memory_order_acquire) < e.ring_end) {
    setDeferredState(e.held, ipc::kDeferredLost);
  }
  e.held.clear();
}

bool DevicePipeline::fetchDueLocked() {
  const ipc::RingControl* ctl = ring_.control();
  // Acquire: pairs with the daemon's release store of a new generation after the fields.
  const uint32_t generation = ctl->fetch_generation.load(std::memory_order_acquire);
  if (generation != fetch_generation_) {
    fetch_generation_ = generation;
    fetch_through_ = ctl->fetch_through_iteration.load(std::memory_order_relaxed);
    fetch_from_ = ctl->fetch_from_sequence.load(std::memory_order_relaxed);
    fill_due_ = true;
  }
  return fill_due_;
}

void DevicePipeline::fillLocked(int& current) {
  fill_due_ = false;
  struct Job {
    uint64_t id;
    DeviceState* dev;
    EventHandle done;
    std::vector<DeviceCopy> held;
  };
  std::vector<Job> jobs;
  for (uint64_t id = front_id_; id < front_id_ + entries_.size(); ++id) {
    Entry& e = entryLocked(id);
    if (e.hold != Hold::kHeld || !fetchCoversLocked(e)) continue;
    e.hold = Hold::kFilling;  // neither dropped nor reclaimed meanwhile
    jobs.push_back(Job{id, e.dev, e.done, e.held});
  }
  if (jobs.empty()) return;
  mu_.unlock();
  // Each device's copies queue on its copy stream after the snapshot (`done`); one event
  // after them per device, then wait for all.
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
    if (s) s = api_->streamWaitEvent(j.dev->copy_stream, j.done);
    for (const DeviceCopy& c : j.held) {
      if (!s) break;
      s = api_->copyAsync(c.ring_dst, c.device_src, c.bytes, j.dev->copy_stream);
    }
    if (std::find(used.begin(), used.end(), j.dev) == used.end()) used.push_back(j.dev);
  }
  for (DeviceState* dev : used) {
    if (!s) break;
    if (current != dev->device) {
      auto prev = api_->setDevice(dev->device);
      if (!prev) s = prev.error();
      current = dev->device;
    }
    if (s) s = api_->recordEvent(dev->fill_event, dev->copy_stream);
  }
  for (DeviceState* dev : used) {
    if (s) s = api_->waitEvent(dev->fill_event);
  }
  mu_.lock();
  if (!s) noteErrorLocked(s.error().message);
  // All copies completed before any record is marked: the daemon writes (and then releases)
  // a record only once marked, so no copy can land in ring space it gave back.
  for (const Job& j : jobs) {
    Entry& e = entryLocked(j.id);
    setDeferredState(e.held, s ? ipc::kDeferredFilled : ipc::kDeferredLost);
    ++(s ? counters_.deferred_filled : counters_.deferred_dropped);
    e.hold = Hold::kReleased;
    e.held.clear();
    reclaimLocked(*e.dev);
  }
  popFinishedLocked();
  fill_cv_.signalAll();
  work_cv_.signal();
}

}  // namespace dumpd::client
