// statistic.csv text (spec section 5): the header line and one row per tensor.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/dtype.h"
#include "config/dump_plan.h"
#include "config/filter.h"
#include "config/ms_format.h"
#include "storage/statistics.h"

namespace dumpd::storage {

struct StatRow {
  std::string_view op_type;  // primitive name, as given
  std::string_view op_name;  // full scope name, unsanitised
  uint32_t task_id = 0;
  uint32_t stream_id = 0;
  uint64_t timestamp_us = 0;
  Io io = Io::kOutput;
  uint32_t slot = 0;
  uint64_t data_size = 0;  // bytes of the original tensor
  DType dtype = DType::kFloat32;
  std::span<const int64_t> shape;
};

// "Op Type,...,Shape" + ",<Header>" per category + "\n" (no trailing comma).
std::string statisticCsvHeader(std::span<const config::StatCategory> categories);

// What computeStats must produce for these categories.
StatOptions statOptionsFor(std::span<const config::StatCategory> categories);

// Appends one row: every field followed by ',' then "\n". A field holding ',', '"', CR or LF
// is quoted RFC 4180 style (dumpd: MindSpore writes it raw and breaks the row); the shape is
// always quoted. The generation decides two fields: "2.6" writes Op Name sanitised like the
// file name (Default_Add-op0) and Shape as "(2,3)" ("(3)", "()"); "2.7" writes Op Name as
// given and Shape as "[2,3]" ("[3]", "[]").
void appendStatisticRow(std::string& out, const StatRow& row, const TensorStats& stats,
                        std::span<const config::StatCategory> categories, config::MsFormat format);

}  // namespace dumpd::storage
