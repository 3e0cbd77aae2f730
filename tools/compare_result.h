// What `dumpctl compare` found: one row per tensor pair (or unmatched tensor), in execution
// order, and the summary. Produced by the comparison (dumpctl/compare_command.cc), consumed by the
// CSV writer, the terminal summary and the HTML report (tools/compare_report.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dumpd::tools {

// Pass thresholds (settable on the command line). A pair fails when a metric that is a number
// is on the wrong side of its threshold, or when its non-finite values do not match.
struct Thresholds {
  double min_cosine = 0.99;              // CosineSimilarity must be >= this
  double max_relative_euclidean = 0.05;  // RelativeEuclideanDistance must be <= this
  double max_kl = 0.005;                 // KullbackLeiblerDivergence must be <= this
  double max_statistic_relative = 0.05;  // statistics-only pairs: each relative difference
};

// Metrics of one pair (x = left, y = right, as float64). NaN where a metric is undefined.
struct PairMetrics {
  double cosine = 0;
  double max_absolute_error = 0;
  double accumulated_relative_error = 0;
  double relative_euclidean = 0;
  double kl_divergence = 0;
  double left_mean = 0, left_std = 0;
  double right_mean = 0, right_std = 0;
  double mean_absolute_error = 0;
  double root_mean_square_error = 0;
};

// Statistics-only pairs: the statistic.csv values of both sides (NaN where a side lacks the
// column) and the largest relative difference |l - r| / max(|r|, 1e-30) among the columns both
// have.
struct StatisticPair {
  double left_max = 0, right_max = 0;
  double left_min = 0, right_min = 0;
  double left_avg = 0, right_avg = 0;
  double left_l2norm = 0, right_l2norm = 0;
  double worst_relative = 0;
  std::string worst_column;  // "Max Value", "L2Norm Value", ...
};

enum class RowKind : uint8_t {
  kTensors,        // both sides' tensors compared element by element
  kStatistics,     // statistics-only: statistic.csv columns compared
  kLeftOnly,       // no match on the right ("*" / NaN in the CSV)
  kRightOnly,      // no match on the left
  kShapeMismatch,  // element counts differ: `note` says how
  kError,          // a side could not be read: `note` says why
};

struct CompareRow {
  RowKind kind = RowKind::kTensors;
  uint32_t rank = 0, graph = 0, iteration = 0;
  std::string left_op;       // left full (sanitised) op name, "*" when unmatched
  std::string right_op;      // right full (sanitised) op name, "*" when unmatched
  std::string tensor_index;  // "input.0", "output.1"
  std::string dtype;         // left dtype ("float32"), or the right's when left-only
  std::string shape;         // left shape "[2,3]"
  uint64_t elements = 0;
  PairMetrics metrics;                      // kTensors (NaN elsewhere)
  std::optional<StatisticPair> statistics;  // kStatistics
  bool failed = false;                      // fails the thresholds (see Thresholds)
  std::string note;                         // why it failed, or what could not be compared
};

struct CompareReport {
  std::string left_root, right_root;
  Thresholds thresholds;
  std::vector<CompareRow> rows;         // execution order of the left side
  std::optional<size_t> first_failure;  // index into rows
  uint64_t pairs = 0, failed = 0, left_only = 0, right_only = 0, errors = 0;
  uint64_t bytes_read = 0;  // both sides
  double seconds = 0;
};

}  // namespace dumpd::tools
