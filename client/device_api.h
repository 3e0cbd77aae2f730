// The few accelerator operations the client's device pipeline needs, behind an interface so
// the ordering logic runs in CI against a fake device (tests/client/fake_device.h) and on a
// GPU against CUDA (client/cuda_device.cc). Handles are opaque pointers; a stream handle is
// the producer's own (cudaStream_t for CUDA, including the special values 0x1 legacy and
// 0x2 per-thread default stream).
//
// Threading: every call may come from the producer thread, except waitEvent, which the
// completion thread calls; the issuer thread enqueues copies and, for a flight recorder's
// fetch, creates, records and waits for its own event. Implementations must allow these
// threads concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/dtype.h"
#include "base/result.h"

namespace dumpd::client {

using StreamHandle = void*;
using EventHandle = void*;

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;

  // "cuda", "fake", ... (for messages).
  virtual std::string name() const = 0;
  // Number of usable devices; an error naming why none can be used (no driver, ...).
  virtual Result<int> deviceCount() = 0;

  // Runs the following calls of this thread against `device`; returns the previous one so
  // the caller can restore it (the producer's framework keeps its own current device).
  virtual Result<int> setDevice(int device) = 0;

  virtual Result<void*> allocate(size_t bytes) = 0;  // device memory on the current device
  virtual void free(void* device_ptr) = 0;
  // Pins host memory for DMA (the shared-memory ring), once per session, and maps it into
  // the devices' address space so kernels can write it.
  virtual Status registerHost(void* host, size_t bytes) = 0;
  virtual void unregisterHost(void* host) = 0;
  // The address kernels use for `host`, a byte of memory registerHost registered.
  virtual Result<void*> hostDevicePointer(void* host) = 0;

  // A stream of our own on the current device that does not synchronise with the legacy
  // default stream.
  virtual Result<StreamHandle> createStream() = 0;
  virtual void destroyStream(StreamHandle s) = 0;
  // `blocking_sync`: waitEvent sleeps instead of spinning.
  virtual Result<EventHandle> createEvent(bool blocking_sync) = 0;
  virtual void destroyEvent(EventHandle e) = 0;

  // Enqueues an asynchronous copy of `bytes` on `stream` (device or pinned host memory on
  // either side), on the copy engines.
  virtual Status copyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) = 0;
  // Enqueues a device-to-device copy done by the compute units (a kernel), so it never
  // queues behind device-to-host copies on the copy engines: the snapshot.
  virtual Status snapshotAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) = 0;
  // Device scratch statisticsAsync needs for `elements` elements (a multiple of 16).
  virtual uint64_t statisticsScratchBytes(uint64_t elements) = 0;
  // Enqueues on `stream` one pass over `elements` elements of `dtype` at `src` that writes
  // their ipc::StatsPayload (sums in float64) at `result` (8-aligned: device memory, or
  // registered host memory by its hostDevicePointer), using `scratch`
  // (statisticsScratchBytes(elements) bytes of device memory, 16-aligned). `dtype` has
  // statistics.
  // `counter`: a word of counterWords() memory that holds 0 and that no other launch uses
  // until this one completed (the launch leaves it 0), or nullptr: then the pass may take
  // more kernels.
  virtual Status statisticsAsync(void* result, void* scratch, uint32_t* counter, const void* src,
                                 uint64_t elements, DType dtype, StreamHandle stream) = 0;
  // `count` zeroed words of device memory on the current device, for statisticsAsync's
  // counters (freed with free()).
  virtual Result<uint32_t*> counterWords(size_t count) = 0;
  // Enqueues on `stream` the replica digest (base/fingerprint.h) of `bytes` bytes at `src`
  // (device memory), written at `result` (8-aligned, device-addressable). `scratch`: two
  // zeroed 64-bit words of device memory on the current device that no other launch uses
  // until this one completed (the launch leaves them zero). One kernel; nothing waits.
  // Implementations without a kernel refuse (kUnavailable).
  virtual Status fingerprintAsync(uint64_t* result, uint64_t* scratch, const void* src,
                                  uint64_t bytes, StreamHandle stream) {
    (void)result, (void)scratch, (void)src, (void)bytes, (void)stream;
    return makeError(ErrorCode::kUnavailable, name() + " has no replica digest kernel");
  }
  virtual Status recordEvent(EventHandle e, StreamHandle stream) = 0;
  // `stream` waits, on the device, for the work captured by `e` (the host does not block).
  virtual Status streamWaitEvent(StreamHandle stream, EventHandle e) = 0;
  // Blocks the calling thread until `e` completed (the completion and issuer threads).
  virtual Status waitEvent(EventHandle e) = 0;
  // The device ordinal that owns `p` (for arrays that only give a pointer).
  virtual Result<int> pointerDevice(const void* p) = 0;
};

// The CUDA implementation, or an error saying why it is unavailable (built without CUDA;
// no driver or device at run time). Created once per process and shared.
Result<std::shared_ptr<DeviceApi>> cudaDevice();

}  // namespace dumpd::client
