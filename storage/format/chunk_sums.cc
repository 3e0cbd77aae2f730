#include "storage/format/chunk_sums.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "base/dtype_visit.h"
#include "storage/format/convert.h"
#include "storage/format/stat_lanes.h"

namespace dumpd::storage {
namespace {

// Each sum is a chain of dependent adds in element order: one add latency per element. The
// chunks are independent, so lanes take one chunk each and run their chains side by side. A
// block of each lane's elements is decoded into a transposed buffer first, so that the add
// loop reads one vector row per step.
constexpr int kMaxLanes = 8;
constexpr uint64_t kBlock = 128;

template <int L, typename Load>
inline void lockstep(const Load& load, const uint64_t* first, uint64_t len, double* sum,
                     double* sq) {
  double s[L];
  double q[L];
  for (int j = 0; j < L; ++j) {
    s[j] = sum[j];
    q[j] = sq[j];
  }
  alignas(64) double rows[kBlock][L];
  for (uint64_t i0 = 0; i0 < len; i0 += kBlock) {
    const uint64_t m = std::min(kBlock, len - i0);
    for (int j = 0; j < L; ++j) {
      const uint64_t base = first[j] + i0;
      for (uint64_t i = 0; i < m; ++i) rows[i][j] = load(base + i);
    }
    for (uint64_t i = 0; i < m; ++i) {
      for (int j = 0; j < L; ++j) {
        const double x = rows[i][j];
        s[j] += x;
        q[j] += x * x;  // two roundings: this file is built without FP contraction
      }
    }
  }
  for (int j = 0; j < L; ++j) {
    sum[j] = s[j];
    sq[j] = q[j];
  }
}

// Calls emit(k, sum, sum_squares) for every chunk k >= k0 of `c`, in chunk order, each sum
// taken from 0 in element order.
template <typename Load, typename Emit>
inline void chunkSums(const Load& load, const ChunkLayout& c, uint64_t k0, const Emit& emit) {
  const uint64_t lockstepped = c.last >= c.size ? c.count : c.count - 1;
  uint64_t k = k0;
  uint64_t first[kMaxLanes];
  double s[kMaxLanes];
  double q[kMaxLanes];
  const auto run = [&]<int L>() {
    for (int j = 0; j < L; ++j) {
      first[j] = (k + j) * c.size;
      s[j] = 0;
      q[j] = 0;
    }
    lockstep<L>(load, first, c.size, s, q);
    for (int j = 0; j < L; ++j) {
      if (k + j == c.count - 1 && c.last > c.size) {
        // 2.6: the last chunk also takes the remainder; its chain goes on where it stopped.
        double ts[1] = {s[j]};
        double tq[1] = {q[j]};
        const uint64_t tail[1] = {first[j] + c.size};
        lockstep<1>(load, tail, c.last - c.size, ts, tq);
        s[j] = ts[0];
        q[j] = tq[0];
      }
      emit(k + j, s[j], q[j]);
    }
    k += L;
  };
  while (lockstepped - k >= 8) run.template operator()<8>();
  if (lockstepped - k >= 4) run.template operator()<4>();
  if (lockstepped - k >= 2) run.template operator()<2>();
  if (lockstepped - k >= 1) run.template operator()<1>();
  if (c.last < c.size) {  // 2.7: the short last slice
    first[0] = k * c.size;
    s[0] = 0;
    q[0] = 0;
    lockstep<1>(load, first, c.last, s, q);
    emit(k, s[0], q[0]);
  }
}

// MindSpore 2.6's MeanCalculator over elements [begin, end).
template <typename Load>
inline double runningMean(const Load& load, uint64_t begin, uint64_t end) {
  double mean = 0;
  uint64_t count = 0;
  for (uint64_t i = begin; i < end; ++i) {
    ++count;
    mean += (load(i) - mean) / static_cast<double>(count);
  }
  return mean;
}

template <typename Load>
RuleSums sumsOf(config::MsFormat format, const Load& load, uint64_t n, bool finite) {
  const ChunkLayout c = chunkLayout(format, n);
  const auto size_of = [&c](uint64_t k) { return k + 1 == c.count ? c.last : c.size; };
  RuleSums r;
  if (format == config::MsFormat::k27) {
    double total = 0;
    chunkSums(load, c, 0, [&](uint64_t k, double s, double q) {
      r.sum_squares += q;
      if (c.count == 1) {
        r.avg = s / static_cast<double>(n);
      } else {
        const double chunk_n = static_cast<double>(size_of(k));
        total += (s / chunk_n) * chunk_n;
      }
    });
    if (c.count > 1) r.avg = total / static_cast<double>(n);
    return r;
  }
  chunkSums(load, c, 0, [&](uint64_t, double, double q) { r.sum_squares += q; });
  if (finite) {
    // Every later chunk adds (its finite mean - avg) * 0 = +-0 to a first mean that is never
    // -0: nothing. Only the first chunk's mean is needed.
    r.avg = runningMean(load, 0, c.size);
    return r;
  }
  double avg = 0;
  uint64_t so_far = 0;
  for (uint64_t k = 0; k < c.count; ++k) {
    const uint64_t chunk_n = size_of(k);
    so_far += chunk_n;
    const double mean = runningMean(load, k * c.size, k * c.size + chunk_n);
    avg += (mean - avg) * static_cast<double>(chunk_n / so_far);  // integer quotient, as in 2.6
  }
  r.avg = avg;
  return r;
}

// The AVX2 pass over the chunks that fill whole groups of eight lanes, the rest as above.
template <typename Load>
std::optional<OnePass> onePassAs(LaneType type, config::MsFormat format, const Load& load,
                                 const unsigned char* p, uint64_t n) {
  const ChunkLayout c = chunkLayout(format, n);
  const uint64_t lockstepped = c.last >= c.size ? c.count : c.count - 1;
  const uint64_t groups = lockstepped / 8;
  if (groups == 0 || c.size >= (uint64_t{1} << 31) || !lanePassAvailable()) return std::nullopt;
  const uint64_t laned = 8 * groups;
  thread_local std::vector<double> sums;
  thread_local std::vector<double> squares;
  sums.resize(laned);
  squares.resize(laned);
  RunningMean mean;
  mean.end = c.size;
  const bool ms26 = format == config::MsFormat::k26;
  const LaneCounts lanes =
      lanePass(type, p, c.size, groups, sums.data(), squares.data(), ms26 ? &mean : nullptr);
  if (lanes.non_finite) return std::nullopt;
  OnePass o;
  o.max = lanes.max;
  o.min = lanes.min;
  o.negative = lanes.negative;
  o.positive = lanes.positive;
  for (uint64_t i = laned * c.size; i < n; ++i) {
    const double x = load(i);
    if (!std::isfinite(x)) return std::nullopt;
    o.max = x > o.max ? x : o.max;
    o.min = x < o.min ? x : o.min;
    o.negative += x < 0;
    o.positive += x > 0;
  }
  o.zero = n - o.negative - o.positive;
  if (laned == c.count && c.last > c.size) {
    // 2.6: the last chunk's remainder goes on its chain.
    double& s = sums[laned - 1];
    double& q = squares[laned - 1];
    for (uint64_t i = laned * c.size; i < n; ++i) {
      const double x = load(i);
      s += x;
      q += x * x;
    }
  }
  double total = 0;
  const auto add = [&](uint64_t k, double s, double q) {
    o.rule.sum_squares += q;
    const double chunk_n = static_cast<double>(k + 1 == c.count ? c.last : c.size);
    total += (s / chunk_n) * chunk_n;
  };
  for (uint64_t k = 0; k < laned; ++k) add(k, sums[k], squares[k]);
  if (laned < c.count) chunkSums(load, c, laned, add);
  // 2.6 with no NaN or inf: the first chunk's running mean (see sumsOf).
  o.rule.avg = ms26 ? mean.mean : total / static_cast<double>(n);
  return o;
}

template <typename T>
inline double loadAs(const unsigned char* p, uint64_t i) {
  return static_cast<double>(loadUnaligned<T>(p + i * sizeof(T)));
}

RuleSums dispatch(config::MsFormat format, DType dtype, const unsigned char* p, uint64_t n,
                  bool finite) {
  return visitDType(
      dtype,
      Overloaded{
          [&]<typename T>(DTypeTag<T>) {
            return sumsOf(
                format, [p](uint64_t i) { return loadAs<T>(p, i); }, n, finite);
          },
          [&](BoolTag) {
            return sumsOf(
                format, [p](uint64_t i) { return p[i] != 0 ? 1.0 : 0.0; }, n, finite);
          },
          [&](UInt1Tag) {
            return sumsOf(
                format, [p](uint64_t i) { return loadAs<uint8_t>(p, i); }, n, finite);
          },
          [&](Float16Tag) {
            return sumsOf(
                format,
                [p](uint64_t i) { return double{halfToFloat(loadUnaligned<uint16_t>(p + 2 * i))}; },
                n, finite);
          },
          [&](BFloat16Tag) {
            return sumsOf(
                format,
                [p](uint64_t i) { return double{bf16ToFloat(loadUnaligned<uint16_t>(p + 2 * i))}; },
                n, finite);
          },
          [&](Int4Tag) {
            return sumsOf(
                format,
                [p](uint64_t i) {
                  const uint8_t b = p[i >> 1];
                  return static_cast<double>((i & 1) ? int4High(b) : int4Low(b));
                },
                n, finite);
          },
          []<typename T>(ComplexTag<T>) -> RuleSums { std::abort(); },  // no statistics
          [](UnknownDType) -> RuleSums { std::abort(); },
      });
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) RuleSums dispatchAvx2(config::MsFormat format, DType dtype,
                                                      const unsigned char* p, uint64_t n,
                                                      bool finite) {
  return dispatch(format, dtype, p, n, finite);
}
#endif

}  // namespace

ChunkLayout chunkLayout(config::MsFormat format, uint64_t n) {
  if (format == config::MsFormat::k27) {
    constexpr uint64_t kSlice = 20480;
    if (n <= kSlice) return {1, n, n};
    const uint64_t count = (n - 1) / kSlice + 1;
    return {count, kSlice, n - (count - 1) * kSlice};
  }
  constexpr uint64_t kPerThread = 10000;
  constexpr uint64_t kThreads = 32;
  if (n <= kPerThread) return {1, n, n};
  const uint64_t count = std::min(n / kPerThread, kThreads);
  const uint64_t size = n / count;
  return {count, size, n - (count - 1) * size};
}

RuleSums ruleSums(config::MsFormat format, DType dtype, const unsigned char* data, uint64_t n,
                  bool finite) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return dispatchAvx2(format, dtype, data, n, finite);
#endif
  return dispatch(format, dtype, data, n, finite);
}

std::optional<OnePass> onePassStats(config::MsFormat format, DType dtype, const unsigned char* data,
                                    uint64_t n) {
  switch (dtype) {
    case DType::kFloat32:
      return onePassAs(
          LaneType::kFloat32, format, [data](uint64_t i) { return loadAs<float>(data, i); }, data,
          n);
    case DType::kBFloat16:
      return onePassAs(
          LaneType::kBFloat16, format,
          [data](uint64_t i) { return double{bf16ToFloat(loadUnaligned<uint16_t>(data + 2 * i))}; },
          data, n);
    case DType::kFloat16:
      return onePassAs(
          LaneType::kFloat16, format,
          [data](uint64_t i) { return double{halfToFloat(loadUnaligned<uint16_t>(data + 2 * i))}; },
          data, n);
    default:
      return std::nullopt;
  }
}

}  // namespace dumpd::storage
