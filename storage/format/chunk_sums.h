// The sums behind statistic.csv's avg and l2norm, split into chunks and combined exactly as
// each generation of MindSpore's writer does (docs/compatibility.md, "How MindSpore sums"):
// the same doubles, so the printed digits are MindSpore's for every size.
#pragma once

#include <cstdint>
#include <optional>

#include "base/dtype.h"
#include "config/ms_format.h"

namespace dumpd::storage {

// The chunks MindSpore's TensorSummary cuts n > 0 elements into: `count` chunks of `size`
// elements, the last of `last` (2.6: size plus the remainder; 2.7: the remainder).
struct ChunkLayout {
  uint64_t count = 1;
  uint64_t size = 0;
  uint64_t last = 0;
};

// "2.6": one chunk up to 10000 elements; above, min(n / 10000, 32) chunks of n / chunks.
// "2.7": one chunk up to 20480 elements; above, slices of 20480.
ChunkLayout chunkLayout(config::MsFormat format, uint64_t n);

struct RuleSums {
  // "2.6": the running mean (mean += (x - mean) / k) of the first chunk, poisoned by a later
  // chunk whose running mean is not finite (MindSpore weighs later chunks by an integer
  // quotient that is 0). "2.7": the sum of each slice's (sum / size) * size, over n.
  double avg = 0;
  double sum_squares = 0;  // each chunk's x * x in element order, the chunks added in order
};

// `finite` promises that every element is finite and of magnitude at most 2^1020 (no
// running mean can overflow): the later chunks' means then cannot poison the 2.6 average and
// are not computed. The caller knows it from its max/min/NaN pass; false is always correct.
// REQUIRES: hasStatistics(dtype), n > 0, data holds n elements of dtype.
RuleSums ruleSums(config::MsFormat format, DType dtype, const unsigned char* data, uint64_t n,
                  bool finite);

// max, min, the sign counts and the rule sums in one pass, eight chunks to a vector, for
// float32, bfloat16 and float16 tensors of at least eight chunks with no NaN or infinity,
// on a CPU with AVX2. nullopt: none of that holds (or a NaN or inf was met); take
// computeStats' lanes and ruleSums.
struct OnePass {
  double max = 0;  // of equal extremes, either zero: the caller finds which came first
  double min = 0;
  uint64_t negative = 0;
  uint64_t positive = 0;
  uint64_t zero = 0;
  RuleSums rule;
};
std::optional<OnePass> onePassStats(config::MsFormat format, DType dtype, const unsigned char* data,
                                    uint64_t n);

}  // namespace dumpd::storage
