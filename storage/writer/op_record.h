// One op execution handed to storage: views into memory the caller owns (the daemon's ring).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/dtype.h"
#include "config/filter.h"
#include "storage/format/statistics.h"
#include "storage/writer/tensor_memo.h"

namespace dumpd::storage {

struct TensorView {
  Io io = Io::kOutput;
  uint32_t slot = 0;
  DType dtype = DType::kFloat32;
  // What the producer's copy found when it looked for NaN and inf in `data` (the ring's
  // kCheckedBit); kUnknown: it did not look. (Beside dtype: in its padding, so a kept
  // record costs what it did.)
  enum class Scan : uint8_t { kUnknown, kFinite, kNonFinite };
  Scan producer_scan = Scan::kUnknown;
  std::span<const int64_t> shape;             // logical shape (int4: the unpacked last dimension)
  std::string_view format = "DefaultFormat";  // producer's format string (trans_flag false)
  uint64_t timestamp_us = 0;                  // wall clock, microseconds since the epoch
  std::span<const std::byte> data;            // sourceBytes(dtype, elements) bytes
  // Statistics the producer computed on its device (saved_data "statistic" only); `data` is
  // then empty. Not owned.
  const StatSums* sums = nullptr;
  // Dump once (see storage/writer/tensor_memo.h), not owned. `memo`: later tensors repeat this one;
  // the writer publishes what it did there. `same_as`: this tensor repeats that one (`data`
  // empty, `sums` null); its file and row are made from that tensor's (the writer claims a
  // link to its file there: TensorMemo::claimLink).
  TensorMemo* memo = nullptr;
  TensorMemo* same_as = nullptr;
};

struct OpRecord {
  uint32_t graph_id = 0;
  uint32_t iteration = 0;
  std::string_view op_type;  // primitive name ("Add")
  std::string_view op_name;  // full scope name ("Default/Add-op0"), unsanitised
  uint32_t task_id = 0;
  uint32_t stream_id = 0;
  std::span<const TensorView> tensors;
  // JobWriter::takeRowTicket(); 0: rows are appended as soon as the op is written.
  uint64_t row_ticket = 0;
  // What to save of this op in place of the plan's saved_data (the flight recorder writes
  // kept iterations with its own section's value).
  std::optional<config::SavedData> saved_data;

  bool savesTensors(const config::DumpPlan& plan) const {
    return saved_data.value_or(plan.saved_data) != config::SavedData::kStatistic;
  }
  bool savesStatistics(const config::DumpPlan& plan) const {
    return saved_data.value_or(plan.saved_data) != config::SavedData::kTensor;
  }
};

}  // namespace dumpd::storage
