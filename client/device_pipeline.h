// Moves device tensors into the shared-memory ring without a host synchronisation.
//
// For each record the client reserved in the ring, submit() enqueues, on the producer's own
// stream, a device-to-device snapshot of its tensors into a bounded staging area (so later
// kernels, in-place ones and the allocator's reuse of freed blocks included, are ordered
// after it) and records an event after it. An issuer thread then enqueues, on a copy stream
// of ours waiting for that event, the device-to-host copies into the pinned ring: enqueueing
// large copies can block the calling thread while the device's queue is full, and that
// must not be the producer. A completion thread waits for each record's copies, oldest
// first, and commits it; the ring publishes records in reservation order.
// When staging is full, the producer's stream (not the host) waits for the oldest copy.
// Records larger than the staging area, and every record when staging_bytes is 0, are
// copied device-to-host on the producer's stream directly.
// Statistics (DeviceCopy::statistics) take no snapshot and no copy: the kernels run on the
// producer's stream with scratch in staging and write the 96-byte result straight into the
// record (the ring is mapped into the devices' address space), so a record of statistics
// only costs the producer the launches and one event, and the issuer nothing.
//
// Deferred copies (DeviceCopy::deferred, a flight recorder's unselected iteration) take a
// snapshot and statistics (into the record's DeferredPayload) but no device-to-host copy: the
// snapshot's staging region is held after the record is committed. When the daemon fetches
// (RingControl::fetch_*), the issuer copies the held regions into their records and marks
// them filled; when staging needs the space first, the oldest held region is given up and its
// record marked lost (docs/recorder.md, "Keeping CUDA tensors on the device").
//
// Threading: submit() and the other calls belong to the client's producer thread; the
// completion and issuer threads are internal. See docs/architecture.md ("Device tensors").
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "client/device_api.h"
#include "ipc/shm_ring.h"

namespace dumpd::client {

struct DeviceCopy {
  std::byte* ring_dst;     // payload slot in the reserved record
  const void* device_src;  // the tensor's bytes on the device
  uint64_t bytes;          // of the tensor at device_src
  // Statistics instead of bytes: ring_dst receives one ipc::StatsPayload of `elements`
  // elements of `dtype`, computed on the device.
  bool statistics = false;
  DType dtype = DType::kUInt8;
  uint64_t elements = 0;
  // Kept on the device: ring_dst is the bytes area of a PayloadKind::kDeferred payload, whose
  // ipc::DeferredPayload header (statistics of `elements` of `dtype`, state) lies right
  // before it. Copied when the daemon fetches it.
  bool deferred = false;
};

struct PipelineCounters {
  uint64_t records = 0;         // records submitted
  uint64_t staged_records = 0;  // of which snapshotted into staging
  uint64_t direct_records = 0;  // of which copied device-to-host on the producer stream
  uint64_t staging_waits = 0;   // times a producer stream had to wait for staging space
  uint64_t failed_records = 0;  // voided because a device operation failed
  uint64_t statistics = 0;      // tensors whose statistics were computed on the device
  // Flight recorder: records whose tensors were kept on the device, of which later copied to
  // the ring for a fetch.
  // deferred_dropped: held snapshots given up for staging space (usually of iterations the
  // recorder no longer keeps) or because their fetch failed.
  uint64_t deferred_records = 0;
  uint64_t deferred_filled = 0;
  uint64_t deferred_dropped = 0;
  // Producer thread time in submit(), in the runtime calls it made, and blocked on the
  // issuer for staging space (nanoseconds, summed).
  uint64_t submit_ns = 0;
  uint64_t enqueue_ns = 0;
  uint64_t wait_ns = 0;
};

class DevicePipeline {
 public:
  DevicePipeline(std::shared_ptr<DeviceApi> api, ipc::RingProducer& ring, uint64_t staging_bytes);
  // Waits (bounded) for copies in flight, then frees staging and unpins the ring.
  ~DevicePipeline();
  DevicePipeline(const DevicePipeline&) = delete;
  DevicePipeline& operator=(const DevicePipeline&) = delete;

  // Enqueues the copies of reserved record `sequence` (holding `tensors` tensors), whose
  // device tensors all live on `device` and were produced on `stream`. Returns once they are
  // enqueued. On error nothing of the record will be written: the caller voids it.
  // `iteration` and `ring_end` (the reserve head after the record) matter for deferred
  // copies only: which fetch covers them, and whether the daemon released the record.
  Status submit(uint64_t sequence, int device, StreamHandle stream,
                std::span<const DeviceCopy> copies, uint32_t tensors, uint32_t iteration = 0,
                uint64_t ring_end = 0);
  // Whether a record whose deferred copies need `bytes` of staging (snapshots and scratch)
  // would be held on the device (else it is copied at once, as `deferred` allows).
  bool holds(uint64_t bytes) const { return staging_bytes_ != 0 && bytes <= staging_bytes_ / 2; }
  // Pins the ring and sets up `device` (copy stream, staging) now instead of at its first
  // record: both take long (pinning a large ring: hundreds of ms).
  Status prepare(int device);
  // Blocks until every submitted record is committed to the ring (timeout_ms -1: no limit).
  Status drain(int timeout_ms);
  size_t inFlight() const;
  PipelineCounters counters() const;
  // The first device error seen (empty when none); later submits fail with it.
  std::string error() const;

 private:
  struct DeviceState;
  // A deferred record's staging region: held from submit until a fetch copies it (kFilling,
  // then kReleased) or staging needs the space (kReleased, record marked lost).
  enum class Hold : uint8_t { kNone, kHeld, kFilling, kReleased };
  struct Entry {
    uint64_t sequence = 0;
    DeviceState* dev = nullptr;
    EventHandle done = nullptr;
    EventHandle snap = nullptr;      // recorded after the snapshot (staged records)
    std::vector<DeviceCopy> copies;  // staging -> ring, for the issuer
    uint64_t issued_bytes = 0;       // bytes the issuer enqueued (counted until completion)
    bool issued = true;              // the copies and `done` are enqueued
    uint64_t staging_end = 0;        // staging position after this record's region
    uint64_t counter_end = 0;        // the device's next_counter after this record's launches
    uint32_t tensors = 0;
    bool completed = false;
    bool reclaimed = true;  // its staging region is free (true when it has none)
    bool failed = false;
    Hold hold = Hold::kNone;
    std::vector<DeviceCopy> held;  // deferred: staging (device_src) -> ring bytes area
    uint32_t iteration = 0;
    uint64_t ring_end = 0;
  };

  Result<DeviceState*> stateFor(int device);
  Status pinRing();
  Result<EventHandle> takeEvent();
  // Reserves `bytes` of `dev`'s staging for a record; returns the offset. Makes `stream`
  // wait for the copies that still read the space it takes over.
  Result<uint64_t> allocateStaging(DeviceState& dev, uint64_t bytes, StreamHandle stream,
                                   uint64_t& end);
  // A statistics counter word of `dev` free until this record completes, or nullptr.
  uint32_t* takeCounter(DeviceState& dev);
  // Staging bytes a copy takes: its snapshot, or its statistics' scratch.
  uint64_t stagingBytes(const DeviceCopy& c) const;
  // The address kernels write `ring_dst` (a byte of the pinned ring) by.
  void* ringOnDevice(std::byte* ring_dst) const;
  Status enqueueStaged(DeviceState& dev, StreamHandle stream, std::span<const DeviceCopy> copies,
                       Entry& e);
  // Copies device-to-host on the producer's stream; statistics still go through staging.
  Status enqueueDirect(DeviceState& dev, StreamHandle stream, std::span<const DeviceCopy> copies,
                       Entry& e);
  void completionLoop();
  void issuerLoop();
  // Frees `dev`'s staging regions, oldest first, whose copies completed and which are not
  // held for a fetch.
  void reclaimLocked(DeviceState& dev) REQUIRES(mu_);
  // Gives up held entry `e` for staging space (producer thread): marks its record lost
  // unless the daemon already released it.
  void dropHeldLocked(Entry& e) REQUIRES(mu_);
  // Issuer: reads the daemon's fetch request; true when held entries are to be copied now.
  bool fetchDueLocked() REQUIRES(mu_);
  // Issuer: copies the held entries a fetch covers into their records, waits for the
  // copies (without mu_), marks the records filled. `current`: the issuer's device. True
  // when covered entries are still in flight (filled once committed: call again).
  bool fillLocked(int& current) REQUIRES(mu_);
  // Ends `e`'s hold (filled or given up).
  void releaseHoldLocked(Entry& e) REQUIRES(mu_);
  bool fetchCoversLocked(const Entry& e) const REQUIRES(mu_) {
    return fetch_generation_ != 0 && e.sequence >= fetch_from_ && e.iteration <= fetch_through_;
  }
  // Stores `state` into the DeferredPayload header of each of `copies`.
  static void setDeferredState(const std::vector<DeviceCopy>& copies, uint64_t state);
  Entry& entryLocked(uint64_t id) REQUIRES(mu_) { return entries_[id - front_id_]; }
  void popFinishedLocked() REQUIRES(mu_);
  void noteErrorLocked(const std::string& message) REQUIRES(mu_);

  std::shared_ptr<DeviceApi> api_;
  ipc::RingProducer& ring_;
  const uint64_t staging_bytes_;
  bool ring_pinned_ = false;
  std::byte* ring_device_base_ = nullptr;  // the ring's mapped base, as kernels address it
  uint64_t submit_wait_ns_ = 0;            // producer thread: this submit's wait for the issuer
  std::map<int, std::unique_ptr<DeviceState>> devices_;  // producer thread

  mutable Mutex mu_;
  CondVar work_cv_;    // completion thread: new entry, entry issued, or stop
  CondVar issue_cv_;   // issuer thread: new entry to issue, or stop
  CondVar issued_cv_;  // producer: an entry was issued
  CondVar done_cv_;    // drain(): an entry completed
  // Guarded by mu_ too: the DeviceStates' staging positions and regions (clang cannot name
  // mu_ from a DeviceState).
  std::deque<Entry> entries_ GUARDED_BY(mu_);   // submitted, oldest first
  uint64_t front_id_ GUARDED_BY(mu_) = 0;       // id of entries_.front()
  uint64_t next_complete_ GUARDED_BY(mu_) = 0;  // id of the oldest entry not yet completed
  uint64_t next_issue_ GUARDED_BY(mu_) = 0;     // id of the oldest entry not yet issued
  // Device-to-host bytes enqueued and not completed. The issuer keeps it under
  // max_issued_bytes_: a device queue filled with copies blocks the thread that enqueues,
  // and the driver then stalls the producer's launches too.
  uint64_t issued_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t max_issued_bytes_;
  CondVar issue_space_cv_;
  std::vector<EventHandle> free_events_ GUARDED_BY(mu_);
  PipelineCounters counters_ GUARDED_BY(mu_);
  // The daemon's fetch request last read (RingControl::fetch_*), and whether held entries it
  // covers may be waiting (a fetch came, or a covered entry was submitted since).
  uint32_t fetch_generation_ GUARDED_BY(mu_) = 0;
  uint32_t fetch_through_ GUARDED_BY(mu_) = 0;
  uint64_t fetch_from_ GUARDED_BY(mu_) = 0;
  bool fill_due_ GUARDED_BY(mu_) = false;
  uint64_t held_ GUARDED_BY(mu_) = 0;  // entries in Hold::kHeld or kFilling
  CondVar fill_cv_;                    // producer: a fill ended (a held region it needs is free)
  std::string error_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread completion_;
  std::thread issuer_;
};

}  // namespace dumpd::client
