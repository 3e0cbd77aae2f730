// The value statistics of a tensor (max, min, the counts, avg and l2norm's sums by MindSpore's
// rule), without the hashes: what the daemon's writer and a client computing a host tensor's
// statistics itself share (statistics.h adds the hashes and the printed values).
#pragma once

#include <cstdint>
#include <limits>

#include "base/dtype.h"
#include "config/ms_format.h"
#include "storage/format/chunk_sums.h"

namespace dumpd::storage {

// The sums one pass accumulates, before the NaN rules: what a producer that computed the
// statistics on its device sends instead of the bytes (ipc::StatsPayload).
struct StatSums {
  uint64_t count = 0;
  double max = -std::numeric_limits<double>::infinity();  // over non-NaN elements
  double min = std::numeric_limits<double>::infinity();
  double sum = 0;
  double sum_squares = 0;
  uint64_t negative = 0;
  uint64_t positive = 0;
  uint64_t zero = 0;
  uint64_t nan = 0;
  uint64_t negative_inf = 0;
  uint64_t positive_inf = 0;
  // `sum` holds the average by the ms_format generation's own rule (chunk_sums.h), not a sum:
  // statistics a client computed from host bytes with this library.
  bool sum_is_average = false;
};

// max/min keep the first of equal extremes in element order (so a leading -0 is -0), over
// non-NaN elements; `sum` is the rule's average (sum_is_average), `sum_squares` the rule's.
// REQUIRES: hasStatistics(dtype), p holds `elements` elements of dtype.
StatSums computeValueStats(DType dtype, uint64_t elements, const unsigned char* p,
                           config::MsFormat format);

}  // namespace dumpd::storage
