// A host tensor's statistics computed by the client, in place of its bytes, when only
// statistics of it are written (docs/performance.md, "Statistics where the tensor is").
#pragma once

#include <cstddef>
#include <vector>

#include "client/client.h"
#include "config/ms_format.h"

namespace dumpd::client {

// Writes t's ipc::StatsPayload (kStatsAverage: avg and the sum of squares by `format`'s rule,
// the same library the daemon's writer uses) to dst. A strided tensor is first copied in C
// order into `scratch` (grown as needed, kept by the caller for the next one): the rule's
// chunks are runs of the C-ordered elements.
// REQUIRES: t is a host tensor with value statistics.
void writeHostStatistics(std::byte* dst, const Tensor& t, config::MsFormat format,
                         std::vector<std::byte>& scratch);

}  // namespace dumpd::client
