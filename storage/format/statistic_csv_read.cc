// Reading statistic.csv back (storage/format/statistic_csv.h); the writer is statistic_csv.cc.
#include <unordered_map>

#include "storage/format/csv.h"
#include "storage/format/names.h"
#include "storage/format/statistic_csv.h"

namespace dumpd::storage {
namespace {

// A statistic value: what from_chars reads, with an optional leading '+'.
std::optional<double> parseValue(std::string_view s) {
  double v = 0;
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (!parseDecimal(s, v)) return std::nullopt;
  return v;
}

}  // namespace

Result<StatisticCsv> parseStatisticCsv(std::string_view text, const std::string& name) {
  auto records = parseCsv(text, name);
  if (!records) return records.error();
  StatisticCsv out;
  if (records->empty()) return out;
  std::unordered_map<std::string, size_t> column;
  for (size_t i = 0; i < (*records)[0].fields.size(); ++i) column[(*records)[0].fields[i]] = i;
  for (const char* required : {"Op Name", "Timestamp", "IO", "Slot"}) {
    if (!column.contains(required)) {
      return makeError(ErrorCode::kInvalidArgument,
                       name + ": the header has no '" + std::string(required) + "' column");
    }
  }
  const bool has_task = column.contains("Task ID"), has_stream = column.contains("Stream ID");
  for (size_t r = 1; r < records->size(); ++r) {
    const CsvRecord& rec = (*records)[r];
    auto field = [&](const char* header) -> std::string_view {
      auto it = column.find(header);
      return it == column.end() || it->second >= rec.fields.size()
                 ? std::string_view{}
                 : std::string_view(rec.fields[it->second]);
    };
    StatisticCsvRow row;
    row.line = rec.line;
    bool ok = parseDecimal(field("Timestamp"), row.timestamp) && parseIoName(field("IO"), row.io) &&
              parseDecimal(field("Slot"), row.slot);
    if (has_task) ok = ok && parseDecimal(field("Task ID"), row.task_id);
    if (has_stream) ok = ok && parseDecimal(field("Stream ID"), row.stream_id);
    if (!ok || field("Op Name").empty()) {
      if (out.bad_rows++ == 0) out.first_bad_line = rec.line;
      continue;
    }
    row.op_type = sanitizeName(field("Op Type"));
    row.op_name = sanitizeName(field("Op Name"));
    row.dtype = std::string(field("Data Type"));
    row.shape = parseShapeText(field("Shape"));
    row.max = parseValue(field("Max Value"));
    row.min = parseValue(field("Min Value"));
    row.avg = parseValue(field("Avg Value"));
    row.l2norm = parseValue(field("L2Norm Value"));
    out.rows.push_back(std::move(row));
  }
  return out;
}

}  // namespace dumpd::storage
