// The statistics kernel of the CUDA device pipeline (client/device_stats.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace dumpd::client {

// Scratch bytes launchDeviceStatistics needs for `elements` elements (one partial result
// per block).
uint64_t deviceStatisticsScratch(uint64_t elements);

// Enqueues on `stream` the statistics of `elements` elements of `dtype` at `src` (any
// alignment), written as one ipc::StatsPayload at `result` (8-aligned, device-addressable).
// `counter`: a device word holding 0 that no other launch uses until this one completed;
// the pass then takes one kernel and leaves it 0. nullptr: two kernels, no counter.
cudaError_t launchDeviceStatistics(void* result, void* scratch, unsigned* counter, const void* src,
                                   uint64_t elements, DType dtype, cudaStream_t stream);

}  // namespace dumpd::client
