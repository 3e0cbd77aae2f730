// The statistics of a device tensor in one pass on the producer's stream: per-block partial
// sums in float64, then a one-block kernel that merges them in block order (deterministic)
// into an ipc::StatsPayload, written where the caller says (the record in the mapped ring).
// Only those 96 bytes cross to the host.
//
// The pass is bound by device memory bandwidth: each thread reads 16 bytes at a time where
// the tensor is 16-byte aligned, enough blocks run to keep every SM busy, and the per-element
// work stays cheap (values compared and counted as float where float holds them exactly,
// 32-bit counters per thread; only the sums are float64).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "base/dtype_visit.h"
#include "client/device_stats.h"
#include "ipc/ring_format.h"

namespace dumpd::client {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kMaxBlocks = 1024;        // 4-8 per SM on current GPUs
constexpr uint64_t kElementsPerThread = 16;  // before another block is worth launching

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

template <typename V>
__device__ inline V infinity();
template <>
__device__ inline float infinity<float>() {
  return __int_as_float(0x7f800000);
}
template <>
__device__ inline double infinity<double>() {
  return __longlong_as_double(0x7ff0000000000000ll);
}

// One thread's running statistics over values of type V (float or double). The host's rules
// (storage/format/statistics.cc): NaN never replaces max/min; it is counted.
template <typename V>
struct Running {
  V max = -infinity<V>();
  V min = infinity<V>();
  double sum = 0;
  double sum_squares = 0;
  unsigned negative = 0, positive = 0, zero = 0, nan = 0, negative_inf = 0, positive_inf = 0;

  __device__ void add(V x) {
    max = x > max ? x : max;
    min = x < min ? x : min;
    const double d = static_cast<double>(x);
    sum += d;
    sum_squares = fma(d, d, sum_squares);
    negative += x < 0;
    positive += x > 0;
    zero += x == 0;
    nan += x != x;
    negative_inf += x == -infinity<V>();
    positive_inf += x == infinity<V>();
  }

  __device__ Partial partial() const {
    Partial p;
    p.max = static_cast<double>(max);
    p.min = static_cast<double>(min);
    p.sum = sum;
    p.sum_squares = sum_squares;
    p.negative = negative;
    p.positive = positive;
    p.zero = zero;
    p.nan = nan;
    p.negative_inf = negative_inf;
    p.positive_inf = positive_inf;
    return p;
  }
};

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

// Element loaders: element i of the tensor as a value V, read from the raw bytes it is
// (bfloat16/float16 bit patterns, packed int4), aligned or not. kVector elements fill 16
// bytes; vector(v, out) reads the v-th 16 bytes of a 16-aligned tensor at once.
template <typename T>
struct Plain {
  // float holds every value of the narrow types exactly; wider ones need double.
  using V = std::conditional_t<(sizeof(T) <= 2 || std::is_same_v<T, float>), float, double>;
  static constexpr int kVector = static_cast<int>(16 / sizeof(T));
  const unsigned char* p;
  bool aligned;
  __device__ T raw(uint64_t i) const {
    if (aligned) return reinterpret_cast<const T*>(p)[i];
    T v;
    unsigned char* d = reinterpret_cast<unsigned char*>(&v);
    for (unsigned k = 0; k < sizeof(T); ++k) d[k] = p[i * sizeof(T) + k];
    return v;
  }
  __device__ V operator()(uint64_t i) const { return static_cast<V>(raw(i)); }
  __device__ void vector(uint64_t v, V* out) const {
    union {
      uint4 word;
      T element[kVector];
    } u;
    u.word = reinterpret_cast<const uint4*>(p)[v];
#pragma unroll
    for (int k = 0; k < kVector; ++k) out[k] = static_cast<V>(u.element[k]);
  }
};

struct Bool {
  using V = float;
  static constexpr int kVector = 16;
  const unsigned char* p;
  __device__ V operator()(uint64_t i) const { return p[i] != 0 ? 1.0f : 0.0f; }
  __device__ void vector(uint64_t v, V* out) const {
    union {
      uint4 word;
      unsigned char element[16];
    } u;
    u.word = reinterpret_cast<const uint4*>(p)[v];
#pragma unroll
    for (int k = 0; k < 16; ++k) out[k] = u.element[k] != 0 ? 1.0f : 0.0f;
  }
};

// float16 and bfloat16: 2-byte bit patterns widened to float.
template <typename Widen>
struct Narrow {
  using V = float;
  static constexpr int kVector = 8;
  Plain<uint16_t> bits;
  __device__ V operator()(uint64_t i) const { return Widen()(bits.raw(i)); }
  __device__ void vector(uint64_t v, V* out) const {
    union {
      uint4 word;
      uint16_t element[8];
    } u;
    u.word = reinterpret_cast<const uint4*>(bits.p)[v];
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = Widen()(u.element[k]);
  }
};

struct HalfBits {
  __device__ float operator()(uint16_t b) const {
    __half_raw r;
    r.x = b;
    return __half2float(__half(r));
  }
};

struct BFloat16Bits {
  __device__ float operator()(uint16_t b) const {
    return __uint_as_float(static_cast<unsigned>(b) << 16);
  }
};

struct Int4 {
  using V = float;
  static constexpr int kVector = 1;  // two elements a byte: read one at a time
  const unsigned char* p;
  __device__ V operator()(uint64_t i) const {
    const unsigned char b = p[i >> 1];
    const int nibble = (i & 1) ? (b >> 4) : (b & 0xf);
    return static_cast<V>(nibble >= 8 ? nibble - 16 : nibble);
  }
  __device__ void vector(uint64_t, V*) const {}
};

// Folds the block's `shared` partials (one per thread) into shared[0].
__device__ inline void reduceBlock(Partial* shared) {
  __syncthreads();
  for (unsigned width = kThreads / 2; width > 0; width >>= 1) {
    if (threadIdx.x < width) merge(shared[threadIdx.x], shared[threadIdx.x + width]);
    __syncthreads();
  }
}

// Reads a partial another block wrote, from L2 (this SM's L1 never held it, but say so).
__device__ inline Partial loadPartial(const Partial* p) {
  Partial r;
  const auto* src = reinterpret_cast<const unsigned long long*>(p);
  auto* dst = reinterpret_cast<unsigned long long*>(&r);
#pragma unroll
  for (unsigned k = 0; k < sizeof(Partial) / 8; ++k) dst[k] = __ldcg(src + k);
  return r;
}

// Merges the blocks' partials in block order into shared[0] (the same order whichever block
// runs this, so the result is deterministic).
__device__ inline void mergeParts(const Partial* parts, unsigned blocks, Partial* shared) {
  Partial a = identity();
  for (unsigned b = threadIdx.x; b < blocks; b += kThreads) merge(a, loadPartial(parts + b));
  shared[threadIdx.x] = a;
  reduceBlock(shared);
}

// Thread 0 writes the result with 8-byte stores (it may be the record in the mapped ring,
// 8-aligned).
__device__ inline void writeResult(const Partial& s, uint64_t n, uint64_t* result) {
  union {
    ipc::StatsPayload payload;
    uint64_t words[sizeof(ipc::StatsPayload) / 8];
  } r;
  r.payload.count = n;
  r.payload.nan = s.nan;
  r.payload.negative_inf = s.negative_inf;
  r.payload.positive_inf = s.positive_inf;
  r.payload.zero = s.zero;
  r.payload.negative = s.negative;
  r.payload.positive = s.positive;
  r.payload.max = s.max;
  r.payload.min = s.min;
  r.payload.sum = s.sum;
  r.payload.sum_squares = s.sum_squares;
  r.payload.flags = 0;
#pragma unroll
  for (unsigned k = 0; k < sizeof(r.words) / 8; ++k) result[k] = r.words[k];
}

// Each block folds a grid-strided share of the tensor into one Partial: 16 bytes a thread at
// a time (two loads in flight) where `vectors` is set, element by element for the rest.
// One block writes the result itself. With `counter` (a zero word no other launch uses
// meanwhile) the last block to finish merges every block's partial and resets the counter:
// one kernel a tensor. Without it the blocks leave their partials for finalStatistics.
template <typename Load>
__global__ void __launch_bounds__(kThreads)
    partialStatistics(Load load, uint64_t n, bool vectors, Partial* parts, unsigned* counter,
                      uint64_t* result) {
  using V = typename Load::V;
  constexpr int kVector = Load::kVector;
  Running<V> a;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t scalar_from = 0;
  if (kVector > 1 && vectors) {
    const uint64_t count = n / kVector;
    uint64_t v = first;
    for (; v + stride < count; v += 2 * stride) {
      V x[kVector], y[kVector];
      load.vector(v, x);
      load.vector(v + stride, y);
#pragma unroll
      for (int k = 0; k < kVector; ++k) a.add(x[k]);
#pragma unroll
      for (int k = 0; k < kVector; ++k) a.add(y[k]);
    }
    if (v < count) {
      V x[kVector];
      load.vector(v, x);
#pragma unroll
      for (int k = 0; k < kVector; ++k) a.add(x[k]);
    }
    scalar_from = count * kVector;
  }
  for (uint64_t i = scalar_from + first; i < n; i += stride) a.add(load(i));
  __shared__ Partial shared[kThreads];
  shared[threadIdx.x] = a.partial();
  reduceBlock(shared);
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) writeResult(shared[0], n, result);
    return;
  }
  __shared__ bool last;
  if (threadIdx.x == 0) {
    parts[blockIdx.x] = shared[0];
    last = false;
    if (counter != nullptr) {
      __threadfence();  // the partial is visible device-wide before the count says so
      last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  mergeParts(parts, gridDim.x, shared);
  if (threadIdx.x == 0) {
    writeResult(shared[0], n, result);
    *counter = 0;  // ready for the next launch that takes this word
  }
}

// The merge as a kernel of its own, for launches without a counter.
__global__ void __launch_bounds__(kThreads)
    finalStatistics(const Partial* parts, unsigned blocks, uint64_t n, uint64_t* result) {
  __shared__ Partial shared[kThreads];
  mergeParts(parts, blocks, shared);
  if (threadIdx.x == 0) writeResult(shared[0], n, result);
}

unsigned blocksFor(uint64_t elements) {
  const uint64_t per_block = kThreads * kElementsPerThread;
  const uint64_t b = (elements + per_block - 1) / per_block;
  return static_cast<unsigned>(b == 0 ? 1 : (b < kMaxBlocks ? b : kMaxBlocks));
}

template <typename Load>
cudaError_t launch(Load load, const void* src, void* result, void* scratch, unsigned* counter,
                   uint64_t n, cudaStream_t stream) {
  const unsigned blocks = blocksFor(n);
  auto* parts = static_cast<Partial*>(scratch);
  auto* out = static_cast<uint64_t*>(result);
  const bool vectors = reinterpret_cast<uintptr_t>(src) % 16 == 0;
  partialStatistics<<<blocks, kThreads, 0, stream>>>(load, n, vectors, parts, counter, out);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (blocks == 1 || counter != nullptr) return cudaSuccess;
  finalStatistics<<<1, kThreads, 0, stream>>>(parts, blocks, n, out);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launchPlain(const unsigned char* p, void* result, void* scratch, unsigned* counter,
                        uint64_t n, cudaStream_t stream) {
  const bool aligned = reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0;
  return launch(Plain<T>{p, aligned}, p, result, scratch, counter, n, stream);
}

}  // namespace

uint64_t deviceStatisticsScratch(uint64_t elements) {
  return (blocksFor(elements) * sizeof(Partial) + 15) / 16 * 16;
}

cudaError_t launchDeviceStatistics(void* result, void* scratch, unsigned* counter, const void* src,
                                   uint64_t elements, DType dtype, cudaStream_t stream) {
  const auto* p = static_cast<const unsigned char*>(src);
  const bool aligned16 = reinterpret_cast<uintptr_t>(p) % 2 == 0;
  // Host code: the kernel is chosen here, per dtype (nvcc builds this file as C++17).
  return visitDType(
      dtype,
      Overloaded{
          [&](auto tag) {
            static_assert(kIsPlainDType<decltype(tag)>, "a dtype without a kernel");
            using T = typename decltype(tag)::type;
            return launchPlain<T>(p, result, scratch, counter, elements, stream);
          },
          [&](BoolTag) { return launch(Bool{p}, p, result, scratch, counter, elements, stream); },
          [&](UInt1Tag) {
            return launchPlain<uint8_t>(p, result, scratch, counter, elements, stream);
          },
          [&](Float16Tag) {
            return launch(Narrow<HalfBits>{Plain<uint16_t>{p, aligned16}}, p, result, scratch,
                          counter, elements, stream);
          },
          [&](BFloat16Tag) {
            return launch(Narrow<BFloat16Bits>{Plain<uint16_t>{p, aligned16}}, p, result, scratch,
                          counter, elements, stream);
          },
          [&](Int4Tag) { return launch(Int4{p}, p, result, scratch, counter, elements, stream); },
          // No statistics for complex tensors; no kernel for a value that is no dtype.
          [](Complex64Tag) { return cudaErrorInvalidValue; },
          [](Complex128Tag) { return cudaErrorInvalidValue; },
          [](UnknownDType) { return cudaErrorInvalidValue; },
      });
}

}  // namespace dumpd::client
