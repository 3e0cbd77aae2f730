// The figures of one dump session that status shows (daemon/ring_drain.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "storage/writer/tensor_counters.h"

namespace dumpd::daemon {

// The writer's tensor counters, summed from the outcomes of the writes the session handed
// over (tensors_dropped: not the client's own drops), and what only the session sees.
// Any thread.
struct DrainCounters : storage::TensorCounters {
  std::atomic<uint64_t> records{0};
  std::atomic<uint64_t> tensors_received{0};
  std::atomic<uint64_t> tensors_failed{0};
  std::atomic<uint64_t> tensors_filtered{0};
};

}  // namespace dumpd::daemon
