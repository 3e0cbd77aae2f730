// The replica digest on the device, one kernel: each thread sums whole 32-byte blocks (eight
// words, their weights in registers) with a grid stride, the block's threads add their sums,
// one atomic add per block gathers them, and the last block to finish (a ticket counter)
// writes the digest and clears the scratch for the next launch. The sum is addition mod 2^64,
// so neither the order of the blocks nor the atomics change the digest.
//
// A tensor whose address is not 16-byte aligned (a sliced view) is summed byte by byte: four
// times the loads, the same digest.
#include <cuda_runtime.h>

#include <cstdint>

#include "base/fingerprint_rule.h"
#include "client/device_fingerprint.h"

namespace dumpd::client {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kMaxBlocks = 1024;

__device__ uint64_t blockTotal(uint64_t mine) {
  __shared__ unsigned long long warps[kThreads / 32];
  unsigned long long v = mine;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  uint64_t total = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kThreads / 32; ++w) total += warps[w];
  }
  return total;  // thread 0's is the block's
}

// Thread 0 of each block: adds the block's total; the last block writes the digest.
__device__ void finishBlock(uint64_t total, uint64_t* result, uint64_t* scratch, uint64_t bytes) {
  if (threadIdx.x != 0) return;
  auto* sum = reinterpret_cast<unsigned long long*>(scratch);
  auto* tickets = reinterpret_cast<unsigned long long*>(scratch + 1);
  atomicAdd(sum, static_cast<unsigned long long>(total));
  __threadfence();
  if (atomicAdd(tickets, 1ull) + 1 == gridDim.x) {
    const uint64_t s = atomicExch(sum, 0ull);
    *tickets = 0;
    *result = fingerprintFinish(s, bytes);
  }
}

__global__ void fingerprintBlocks(const uint4* __restrict__ src, uint64_t blocks,
                                  const unsigned char* __restrict__ tail, uint64_t tail_bytes,
                                  uint64_t* result, uint64_t* scratch, uint64_t bytes) {
  uint64_t mine = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks;
       b += stride) {
    const uint4 lo = src[2 * b];
    const uint4 hi = src[2 * b + 1];
    const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    mine += fingerprintBlockSum(w, b);
  }
  if (blockIdx.x == 0 && threadIdx.x < tail_bytes) {  // fewer than 32 bytes after the blocks
    mine += fingerprintByteTerm(tail[threadIdx.x], blocks * 32 + threadIdx.x);
  }
  finishBlock(blockTotal(mine), result, scratch, bytes);
}

__global__ void fingerprintBytes(const unsigned char* __restrict__ src, uint64_t bytes,
                                 uint64_t* result, uint64_t* scratch) {
  uint64_t mine = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t o = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < bytes;
       o += stride) {
    mine += fingerprintByteTerm(src[o], o);
  }
  finishBlock(blockTotal(mine), result, scratch, bytes);
}

unsigned gridFor(uint64_t items) {
  const uint64_t b = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < kMaxBlocks ? b : kMaxBlocks));
}

}  // namespace

cudaError_t launchDeviceFingerprint(uint64_t* result, uint64_t* scratch, const void* src,
                                    uint64_t bytes, cudaStream_t stream) {
  const auto* p = static_cast<const unsigned char*>(src);
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0) {
    const uint64_t blocks = bytes / 32;
    fingerprintBlocks<<<gridFor(blocks), kThreads, 0, stream>>>(
        reinterpret_cast<const uint4*>(p), blocks, p + blocks * 32, bytes - blocks * 32, result,
        scratch, bytes);
  } else {
    fingerprintBytes<<<gridFor(bytes), kThreads, 0, stream>>>(p, bytes, result, scratch);
  }
  return cudaGetLastError();
}

}  // namespace dumpd::client
