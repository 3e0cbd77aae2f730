// The parts of tools/compare_metrics.h that judge rather than sum: statistics of one tensor
// and of a statistics-only pair, and the notes saying why a pair failed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "tools/compare_metrics.h"

namespace dumpd::tools {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// 6 significant digits, for notes.
std::string shortNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

StatisticValues computeStatistics(const TensorData& t) {
  alignas(64) double block[kMetricBlock];
  double sum = 0, sum_sq = 0, lo = kInf, hi = -kInf;
  bool nan = false;
  for (uint64_t at = 0; at < t.values(); at += kMetricBlock) {
    const auto n = static_cast<size_t>(std::min<uint64_t>(kMetricBlock, t.values() - at));
    t.decode(at, n, block);
    for (size_t i = 0; i < n; ++i) {
      const double v = block[i];
      nan |= std::isnan(v);
      sum += v;
      sum_sq += v * v;
      lo = v < lo ? v : lo;  // NaN never replaces a bound (it sets `nan`)
      hi = v > hi ? v : hi;
    }
  }
  StatisticValues s;
  if (t.values() == 0) return s;
  s.max = nan ? kNaN : hi;
  s.min = nan ? kNaN : lo;
  s.avg = nan ? kNaN : sum / static_cast<double>(t.values());
  s.l2norm = std::sqrt(sum_sq);
  return s;
}

StatisticPair compareStatistics(const StatisticValues& l, const StatisticValues& r) {
  StatisticPair p;
  p.left_max = l.max.value_or(kNaN);
  p.right_max = r.max.value_or(kNaN);
  p.left_min = l.min.value_or(kNaN);
  p.right_min = r.min.value_or(kNaN);
  p.left_avg = l.avg.value_or(kNaN);
  p.right_avg = r.avg.value_or(kNaN);
  p.left_l2norm = l.l2norm.value_or(kNaN);
  p.right_l2norm = r.l2norm.value_or(kNaN);
  p.worst_relative = kNaN;
  struct Column {
    const char* name;
    const std::optional<double>& left;
    const std::optional<double>& right;
  };
  const Column columns[] = {{"Max Value", l.max, r.max},
                            {"Min Value", l.min, r.min},
                            {"Avg Value", l.avg, r.avg},
                            {"L2Norm Value", l.l2norm, r.l2norm}};
  for (const Column& c : columns) {
    if (!c.left || !c.right) continue;
    const double a = *c.left, b = *c.right;
    double rel;
    if (std::isfinite(a) && std::isfinite(b)) {
      rel = std::fabs(a - b) / std::max(std::fabs(b), 1e-30);
    } else {
      rel = (std::isnan(a) && std::isnan(b)) || a == b ? 0.0 : kInf;
    }
    if (std::isnan(p.worst_relative) || rel > p.worst_relative) {
      p.worst_relative = rel;
      p.worst_column = c.name;
    }
  }
  return p;
}

PairMetrics nanMetrics() {
  PairMetrics m;
  m.cosine = m.max_absolute_error = m.accumulated_relative_error = m.relative_euclidean = kNaN;
  m.kl_divergence = m.left_mean = m.left_std = m.right_mean = m.right_std = kNaN;
  m.mean_absolute_error = m.root_mean_square_error = kNaN;
  return m;
}

std::string tensorFailure(const PairMetrics& m, const PairSums& sums, const Thresholds& t) {
  std::string why;
  auto add = [&why](const std::string& text) { why.append(why.empty() ? "" : ", ").append(text); };
  if (sums.nonfinite_differ > 0) {
    add(std::to_string(sums.nonfinite_differ) + " elements differ in nan/inf");
  }
  if (!std::isnan(m.cosine) && m.cosine < t.min_cosine) {
    add("cosine " + shortNumber(m.cosine) + " < " + shortNumber(t.min_cosine));
  }
  if (!std::isnan(m.relative_euclidean) && m.relative_euclidean > t.max_relative_euclidean) {
    add("relative euclidean " + shortNumber(m.relative_euclidean) + " > " +
        shortNumber(t.max_relative_euclidean));
  }
  if (!std::isnan(m.kl_divergence) && m.kl_divergence > t.max_kl) {
    add("KL " + shortNumber(m.kl_divergence) + " > " + shortNumber(t.max_kl));
  }
  return why;
}

std::string statisticFailure(const StatisticPair& s, const Thresholds& t) {
  if (std::isnan(s.worst_relative) || s.worst_relative <= t.max_statistic_relative) return {};
  return s.worst_column + " relative difference " + shortNumber(s.worst_relative) + " > " +
         shortNumber(t.max_statistic_relative);
}

}  // namespace dumpd::tools
