// Kernels of the CUDA device pipeline (client/device_copy.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace dumpd::client {

// Enqueues a device-to-device copy of `bytes` on `stream`, done by the SMs (a kernel).
cudaError_t launchDeviceCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace dumpd::client
