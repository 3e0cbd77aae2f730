// The statistics of a device tensor in one pass on the producer's stream: per-block partial
// sums in float64, then a one-block kernel that merges them in block order (deterministic)
// into an ipc::StatsPayload. Only those 96 bytes cross to the host.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/dtype_visit.h"
#include "client/device_stats.h"
#include "ipc/ring_format.h"

namespace dumpd::client {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kMaxBlocks = 256;
constexpr uint64_t kElementsPerThread = 8;  // before another block is worth launching

struct Partial {
  double max;
  double min;
  double sum;
  double sum_squares;
  unsigned long long negative;
  unsigned long long positive;
  unsigned long long zero;
  unsigned long long nan;
  unsigned long long negative_inf;
  unsigned long long positive_inf;
};

__device__ inline Partial identity() {
  Partial p;
  p.max = -__longlong_as_double(0x7ff0000000000000ll);
  p.min = __longlong_as_double(0x7ff0000000000000ll);
  p.sum = p.sum_squares = 0;
  p.negative = p.positive = p.zero = p.nan = p.negative_inf = p.positive_inf = 0;
  return p;
}

// The host's rules (storage/statistics.cc): NaN never replaces max/min; it is counted.
__device__ inline void add(Partial& a, double x) {
  const double inf = __longlong_as_double(0x7ff0000000000000ll);
  a.max = x > a.max ? x : a.max;
  a.min = x < a.min ? x : a.min;
  a.sum += x;
  a.sum_squares += x * x;
  a.negative += x < 0;
  a.positive += x > 0;
  a.zero += x == 0;
  a.nan += x != x;
  a.negative_inf += x == -inf;
  a.positive_inf += x == inf;
}

__device__ inline void merge(Partial& a, const Partial& b) {
  a.max = b.max > a.max ? b.max : a.max;
  a.min = b.min < a.min ? b.min : a.min;
  a.sum += b.sum;
  a.sum_squares += b.sum_squares;
  a.negative += b.negative;
  a.positive += b.positive;
  a.zero += b.zero;
  a.nan += b.nan;
  a.negative_inf += b.negative_inf;
  a.positive_inf += b.positive_inf;
}

// Element loaders: element i of the tensor as a double. Tensors are read as the raw bytes
// they are (bfloat16/float16 bit patterns, packed int4), aligned or not.
template <typename T>
struct Plain {
  const unsigned char* p;
  bool aligned;
  __device__ T raw(uint64_t i) const {
    if (aligned) return reinterpret_cast<const T*>(p)[i];
    T v;
    unsigned char* d = reinterpret_cast<unsigned char*>(&v);
    for (unsigned k = 0; k < sizeof(T); ++k) d[k] = p[i * sizeof(T) + k];
    return v;
  }
  __device__ double operator()(uint64_t i) const { return static_cast<double>(raw(i)); }
};

struct Bool {
  const unsigned char* p;
  __device__ double operator()(uint64_t i) const { return p[i] != 0 ? 1.0 : 0.0; }
};

struct Half {
  Plain<uint16_t> bits;
  __device__ double operator()(uint64_t i) const {
    __half_raw r;
    r.x = bits.raw(i);
    return static_cast<double>(__half2float(__half(r)));
  }
};

struct BFloat16 {
  Plain<uint16_t> bits;
  __device__ double operator()(uint64_t i) const {
    return static_cast<double>(__uint_as_float(static_cast<unsigned>(bits.raw(i)) << 16));
  }
};

struct Int4 {
  const unsigned char* p;
  __device__ double operator()(uint64_t i) const {
    const unsigned char b = p[i >> 1];
    const int nibble = (i & 1) ? (b >> 4) : (b & 0xf);
    return static_cast<double>(nibble >= 8 ? nibble - 16 : nibble);
  }
};

template <typename Load>
__global__ void partialStatistics(Load load, uint64_t n, Partial* out) {
  Partial a = identity();
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    add(a, load(i));
  }
  __shared__ Partial shared[kThreads];
  shared[threadIdx.x] = a;
  __syncthreads();
  for (unsigned width = kThreads / 2; width > 0; width >>= 1) {
    if (threadIdx.x < width) merge(shared[threadIdx.x], shared[threadIdx.x + width]);
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = shared[0];
}

__global__ void finalStatistics(const Partial* parts, unsigned blocks, uint64_t n,
                                ipc::StatsPayload* result) {
  Partial a = identity();
  for (unsigned b = threadIdx.x; b < blocks; b += kThreads) merge(a, parts[b]);
  __shared__ Partial shared[kThreads];
  shared[threadIdx.x] = a;
  __syncthreads();
  for (unsigned width = kThreads / 2; width > 0; width >>= 1) {
    if (threadIdx.x < width) merge(shared[threadIdx.x], shared[threadIdx.x + width]);
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  const Partial& s = shared[0];
  ipc::StatsPayload r;
  r.count = n;
  r.nan = s.nan;
  r.negative_inf = s.negative_inf;
  r.positive_inf = s.positive_inf;
  r.zero = s.zero;
  r.negative = s.negative;
  r.positive = s.positive;
  r.max = s.max;
  r.min = s.min;
  r.sum = s.sum;
  r.sum_squares = s.sum_squares;
  r.reserved = 0;
  *result = r;
}

unsigned blocksFor(uint64_t elements) {
  const uint64_t per_block = kThreads * kElementsPerThread;
  const uint64_t b = (elements + per_block - 1) / per_block;
  return static_cast<unsigned>(b == 0 ? 1 : (b < kMaxBlocks ? b : kMaxBlocks));
}

template <typename Load>
cudaError_t launch(Load load, void* result, void* scratch, uint64_t n, cudaStream_t stream) {
  const unsigned blocks = blocksFor(n);
  auto* parts = static_cast<Partial*>(scratch);
  partialStatistics<<<blocks, kThreads, 0, stream>>>(load, n, parts);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  finalStatistics<<<1, kThreads, 0, stream>>>(parts, blocks, n,
                                              static_cast<ipc::StatsPayload*>(result));
  return cudaGetLastError();
}

template <typename T>
cudaError_t launchPlain(const unsigned char* p, void* result, void* scratch, uint64_t n,
                        cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0;
  return launch(Plain<T>{p, aligned}, result, scratch, n, stream);
}

}  // namespace

uint64_t deviceStatisticsScratch(uint64_t elements) {
  return (blocksFor(elements) * sizeof(Partial) + 15) / 16 * 16;
}

cudaError_t launchDeviceStatistics(void* result, void* scratch, const void* src, uint64_t elements,
                                   DType dtype, cudaStream_t stream) {
  const auto* p = static_cast<const unsigned char*>(src);
  const bool aligned16 = reinterpret_cast<uintptr_t>(p) % 2 == 0;
  // Host code: the kernel is chosen here, per dtype (nvcc builds this file as C++17).
  return visitDType(
      dtype,
      Overloaded{
          [&](auto tag) {
            static_assert(kIsPlainDType<decltype(tag)>, "a dtype without a kernel");
            using T = typename decltype(tag)::type;
            return launchPlain<T>(p, result, scratch, elements, stream);
          },
          [&](BoolTag) { return launch(Bool{p}, result, scratch, elements, stream); },
          [&](UInt1Tag) { return launchPlain<uint8_t>(p, result, scratch, elements, stream); },
          [&](Float16Tag) {
            return launch(Half{Plain<uint16_t>{p, aligned16}}, result, scratch, elements, stream);
          },
          [&](BFloat16Tag) {
            return launch(BFloat16{Plain<uint16_t>{p, aligned16}}, result, scratch, elements,
                          stream);
          },
          [&](Int4Tag) { return launch(Int4{p}, result, scratch, elements, stream); },
          // No statistics for complex tensors; no kernel for a value that is no dtype.
          [](Complex64Tag) { return cudaErrorInvalidValue; },
          [](Complex128Tag) { return cudaErrorInvalidValue; },
          [](UnknownDType) { return cudaErrorInvalidValue; },
      });
}

}  // namespace dumpd::client
