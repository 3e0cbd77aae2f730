// DevicePipeline's staging: regions taken from each device's staging area in order (waiting
// on the device, never the host, for copies still reading them), statistics counter words,
// and the enqueueing of a record's snapshots, statistics and direct copies.
#include <algorithm>
#include <chrono>

#include "client/device_pipeline.h"
#include "client/device_pipeline_state.h"
#include "ipc/ring_format.h"

namespace dumpd::client {

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

}  // namespace dumpd::client
