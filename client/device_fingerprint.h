// The replica digest of device memory (client/device_fingerprint.cu): one kernel on the
// caller's stream; only the 8-byte digest is written, where the caller says.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dumpd::client {

// Enqueues on `stream` the digest (base/fingerprint.h) of `bytes` bytes at `src` (device
// memory, any alignment), written at `result` (8-aligned, device-addressable: device memory
// or registered host memory by its device pointer). `scratch`: two zeroed 64-bit words of
// device memory that no other launch uses until this one completed; the kernel leaves them
// zero, so one pair serves every launch of a stream.
cudaError_t launchDeviceFingerprint(uint64_t* result, uint64_t* scratch, const void* src,
                                    uint64_t bytes, cudaStream_t stream);

}  // namespace dumpd::client
