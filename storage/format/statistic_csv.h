// statistic.csv (spec section 5): the header line and one row per tensor, written by the
// writer and read back by the offline tools, both here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/result.h"
#include "config/dump_plan.h"
#include "config/filter.h"
#include "config/ms_format.h"
#include "storage/format/statistics.h"

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
StatOptions statOptionsFor(std::span<const config::StatCategory> categories,
                           config::MsFormat format = config::kDefaultMsFormat);

// Appends one row: every field followed by ',' then "\n". A field holding ',', '"', CR or LF
// is quoted RFC 4180 style (dumpd: MindSpore writes it raw and breaks the row); the shape is
// always quoted. The generation decides two fields: "2.6" writes Op Name sanitised like the
// file name (Default_Add-op0) and Shape as "(2,3)" ("(3)", "()"); "2.7" writes Op Name as
// given and Shape as "[2,3]" ("[3]", "[]").
void appendStatisticRow(std::string& out, const StatRow& row, const TensorStats& stats,
                        std::span<const config::StatCategory> categories, config::MsFormat format);

// --- Reading statistic.csv back ---

// One row read back. Names are sanitised (2.6 writes Op Name sanitised, 2.7 as given).
struct StatisticCsvRow {
  size_t line = 0;  // 1-based line of the file the row starts on
  std::string op_type, op_name, dtype;
  uint32_t task_id = 0, stream_id = 0, slot = 0;  // 0 where the file has no such column
  uint64_t timestamp = 0;
  Io io = Io::kOutput;
  std::optional<std::vector<int64_t>> shape;  // nullopt: no Shape column, or not a shape
  std::optional<double> max, min, avg, l2norm;
};

struct StatisticCsv {
  std::vector<StatisticCsvRow> rows;
  // Rows without the fields that name a tensor (Op Name, Timestamp, IO, Slot, and Task ID and
  // Stream ID where the header has them): counted, not returned.
  size_t bad_rows = 0;
  size_t first_bad_line = 0;  // of the first such row
};

// Parses a whole statistic.csv of either generation (columns found by their header names).
// kInvalidArgument naming `name`: malformed CSV, or a header without Op Name, Timestamp, IO or
// Slot. An empty text has no rows.
Result<StatisticCsv> parseStatisticCsv(std::string_view text, const std::string& name);

}  // namespace dumpd::storage
