// The metrics of one tensor pair (shared/spec/compare.md), in double precision.
//
// Rules (for docs/):
// * x = left, y = right, each decoded to double and flattened (tools/tensor_data.h; complex
//   tensors as 2n reals). n = the number of element pairs counted (see the next rule).
// * Non-finite values: an element where both sides are NaN, or both are the same infinity,
//   counts as equal and is left out of every sum (and of n). An element where the non-finite
//   values differ (NaN or an infinity on one side only, or +inf against -inf) is also left
//   out, and makes the pair fail: "N elements differ in nan/inf".
// * CosineSimilarity = sum(x*y) / (sqrt(sum x^2) * sqrt(sum y^2)), clamped to [-1, 1] against
//   rounding; NaN when either side is all zeros (0/0).
// * MaxAbsoluteError = max |x - y|. AccumulatedRelativeError = sum |x - y| / sum |y|.
//   RelativeEuclideanDistance = sqrt(sum (x - y)^2) / sqrt(sum y^2). A zero denominator gives
//   inf (numerator > 0) or NaN (0/0), as IEEE division does.
// * StandardDeviation: mean and population standard deviation (ddof 0) of each side, computed
//   per block in two passes and combined exactly (Chan et al.), not from sum x^2.
// * MeanAbsoluteError = sum |x - y| / n; RootMeanSquareError = sqrt(sum (x - y)^2 / n).
// * KullbackLeiblerDivergence: each side is min-max normalised over its counted elements,
//   a = (x - min x) / (max x - min x), then clamped to at least eps = 1e-10, so into [eps, 1];
//   a constant non-zero side normalises to all ones; a side that is all zeros makes KL NaN.
//   p = a / sum(a), q = b / sum(b), KL = sum p * log(p / q), computed as
//   sum(a * log(a / b)) / sum(a) + log(sum(b) / sum(a)). With the clamp KL is never inf.
// * n = 0 (an empty tensor, or every element non-finite on both sides alike): every metric is
//   NaN.
// * All but KL come from one pass over both arrays; KL needs the min/max and takes a second.
//   Passes run over ranges that may be accumulated on different threads and merged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "tools/compare_result.h"
#include "tools/tensor_data.h"

namespace dumpd::tools {

inline constexpr double kKlEpsilon = 1e-10;
// Values decoded per side per block: both blocks stay in L1.
inline constexpr size_t kMetricBlock = 1024;

// What the first pass accumulates over a range of value pairs.
struct PairSums {
  uint64_t counted = 0;           // n: pairs with both values finite
  uint64_t nonfinite_equal = 0;   // both NaN, or the same infinity
  uint64_t nonfinite_differ = 0;  // the pair fails when non-zero
  double sum_xy = 0, sum_xx = 0, sum_yy = 0;
  double sum_abs_diff = 0, sum_sq_diff = 0, sum_abs_y = 0;
  double max_abs_diff = -std::numeric_limits<double>::infinity();
  double min_x = std::numeric_limits<double>::infinity();
  double max_x = -std::numeric_limits<double>::infinity();
  double min_y = std::numeric_limits<double>::infinity();
  double max_y = -std::numeric_limits<double>::infinity();
  double mean_x = 0, m2_x = 0, mean_y = 0, m2_y = 0;  // running mean and sum of squares

  // Adds the pairs `other` covers (a disjoint range).
  void merge(const PairSums& other);
};

// Accumulates n pairs. `x` and `y` are scratch: a block holding a non-finite value is compacted
// in place.
void accumulatePairs(double* x, double* y, size_t n, PairSums& sums);

// The normalisation of each side for KL, from the first pass.
struct KlScale {
  bool defined = false;               // false: n = 0 or a side all zeros (KL is NaN)
  bool skip_nonfinite = false;        // the pair has non-finite values: leave them out again
  double min_x = 0, inv_range_x = 0;  // inv_range 0: constant side, all ones
  double min_y = 0, inv_range_y = 0;
};
KlScale klScale(const PairSums& sums);

struct KlSums {
  double sum_a = 0, sum_b = 0, sum_a_log = 0;  // sum a, sum b, sum a * log(a / b)
  void merge(const KlSums& other);
};

// REQUIRES: scale.defined. `x` and `y` are scratch as above.
void accumulateKl(const KlScale& scale, double* x, double* y, size_t n, KlSums& sums);

// The metrics from both passes (KL NaN unless scale.defined).
PairMetrics finishMetrics(const PairSums& sums, const KlScale& scale, const KlSums& kl);

// Pass 1 / pass 2 over values [begin, end) of two tensors, decoded in blocks.
// REQUIRES: end <= x.values() and end <= y.values().
PairSums sumPairs(const TensorData& x, const TensorData& y, uint64_t begin, uint64_t end);
KlSums sumKl(const KlScale& scale, const TensorData& x, const TensorData& y, uint64_t begin,
             uint64_t end);

// Both passes over the whole of two tensors of equal values(), on this thread.
PairMetrics comparePair(const TensorData& x, const TensorData& y, PairSums* sums_out = nullptr);

// A natural logarithm that GCC vectorises: for normal positive finite x only (what KL feeds
// it: a / b lies in [1e-10, 1e10]); within 2 ulp of std::log there.
double vectorLog(double x);

// For tests: run the baseline kernels (two lanes, SSE2 / NEON) even where the AVX2 ones could
// run. Set it before comparing, not while.
void useBaselineKernels(bool yes);

// max, min, avg and l2norm as MindSpore's statistic.csv defines them: a NaN anywhere makes
// max, min and avg NaN; infinities take part; l2norm = sqrt(sum x^2).
StatisticValues computeStatistics(const TensorData& t);

// Compares the columns both sides have: relative difference |l - r| / max(|r|, 1e-30); both
// NaN or the same infinity count as 0, other non-finite mismatches as inf. The worst is kept
// (worst_relative NaN and worst_column "" when no column is on both sides).
StatisticPair compareStatistics(const StatisticValues& left, const StatisticValues& right);

// Every metric NaN (unmatched rows, n = 0).
PairMetrics nanMetrics();

// Why a compared pair fails `t` ("3 elements differ in nan/inf, cosine 0.95 < 0.99,
// relative euclidean 0.5 > 0.05, KL 0.01 > 0.005"); empty when it passes. A NaN metric never
// fails; an infinite one can.
std::string tensorFailure(const PairMetrics& m, const PairSums& sums, const Thresholds& t);
// "Max Value relative difference 0.1 > 0.05"; empty when it passes.
std::string statisticFailure(const StatisticPair& s, const Thresholds& t);

}  // namespace dumpd::tools
