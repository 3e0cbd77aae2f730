// The running tensor figures of a job's writes, kept by the writer itself (WriterCounters,
// read by JobWriter::counters()) and by each daemon session of the writes it handed over
// (daemon::DrainCounters, read by status): one struct, so the two name and count the same.
//
// Thread-safety: atomics, used relaxed (figures for reports; they order nothing).
#pragma once

#include <atomic>
#include <cstdint>

namespace dumpd::storage {

struct TensorCounters {
  std::atomic<uint64_t> tensors_written{0};  // payload files (or statistic rows when only those)
  std::atomic<uint64_t> tensors_dropped{0};  // payloads skipped (quota, watermark, overflow)
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> tensors_linked{0};  // of tensors_written: dump once repeats
  // No file by MindSpore's rules (zero elements; no overflow in op_debug_mode 3).
  std::atomic<uint64_t> tensors_skipped{0};
};

}  // namespace dumpd::storage
