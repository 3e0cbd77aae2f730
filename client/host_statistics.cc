#include "client/host_statistics.h"

#include <cstring>

#include "base/element_count.h"
#include "client/op_plan.h"
#include "client/strided_copy.h"
#include "ipc/ring_format.h"
#include "storage/format/stat_values.h"

namespace dumpd::client {

void writeHostStatistics(std::byte* dst, const Tensor& t, config::MsFormat format,
                         std::vector<std::byte>& scratch) {
  const uint64_t n = elementCount(t.shape).value_or(0);
  const void* data = t.data;
  if (isStrided(t)) {
    if (scratch.size() < t.bytes) scratch.resize(t.bytes);
    copyStrided(scratch.data(), static_cast<const std::byte*>(t.data), t.shape, t.strides,
                dtypeSize(t.dtype));
    data = scratch.data();
  }
  const storage::StatSums s =
      storage::computeValueStats(t.dtype, n, static_cast<const unsigned char*>(data), format);
  ipc::StatsPayload p{};
  p.count = s.count;
  p.nan = s.nan;
  p.negative_inf = s.negative_inf;
  p.positive_inf = s.positive_inf;
  p.zero = s.zero;
  p.negative = s.negative;
  p.positive = s.positive;
  p.max = s.max;
  p.min = s.min;
  p.sum = s.sum;  // the rule's average (s.sum_is_average)
  p.sum_squares = s.sum_squares;
  p.flags = ipc::kStatsAverage;
  std::memcpy(dst, &p, sizeof p);
}

}  // namespace dumpd::client
