// The snapshot copy as a kernel: cudaMemcpyAsync device-to-device runs on the copy engines,
// where it queues behind dumpd's own device-to-host copies and would stall the producer's
// stream for as long as they take. A kernel copies with the SMs instead.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "client/device_copy.h"

namespace dumpd::client {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 2048;

__global__ void copyVec16(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = src[i];
  }
}

__global__ void copyBytes(unsigned char* __restrict__ dst, const unsigned char* __restrict__ src,
                          size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = src[i];
  }
}

unsigned blocksFor(size_t items) {
  const size_t b = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

}  // namespace

cudaError_t launchDeviceCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  size_t done = 0;
  if ((reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s)) % 16 == 0) {
    const size_t n16 = bytes / 16;
    if (n16 != 0) {
      copyVec16<<<blocksFor(n16), kThreads, 0, stream>>>(reinterpret_cast<uint4*>(d),
                                                         reinterpret_cast<const uint4*>(s), n16);
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    done = n16 * 16;
  }
  if (done < bytes) {
    copyBytes<<<blocksFor(bytes - done), kThreads, 0, stream>>>(d + done, s + done, bytes - done);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

}  // namespace dumpd::client
