// The AVX2 pass of the statistics: eight of MindSpore's chunks at once, one per lane, each
// summed in its own element order (chunk_sums.h), with max, min and the sign counts of the
// same elements on the way. float32, bfloat16 and float16.
#pragma once

#include <cstdint>

namespace dumpd::storage {

enum class LaneType : uint8_t { kFloat32, kBFloat16, kFloat16 };

// MindSpore 2.6's running mean (mean += (x - mean) / k) over elements [next, end) of the first
// chunk, advanced a few steps per block so that its division chain overlaps the lanes' work.
struct RunningMean {
  double mean = 0;
  uint64_t count = 0;
  uint64_t next = 0;
  uint64_t end = 0;
};

struct LaneCounts {
  float max = 0;  // over the elements covered; meaningless when non_finite
  float min = 0;
  uint64_t negative = 0;
  uint64_t positive = 0;
  bool non_finite = false;  // a NaN or an infinity was seen: the caller takes the exact path
};

// Whether this machine runs the pass.
bool lanePassAvailable();

// Chunks 0 .. 8 * groups - 1, each of `size` elements, chunk k starting at element k * size:
// sums[k] and squares[k] get chunk k's sum of x and of x * x (doubles, element order). When
// `mean` is given, its steps run on the way and any left are finished.
// REQUIRES: lanePassAvailable(), groups > 0, 8 <= size < 2^31.
LaneCounts lanePass(LaneType type, const unsigned char* data, uint64_t size, uint64_t groups,
                    double* sums, double* squares, RunningMean* mean);

}  // namespace dumpd::storage
