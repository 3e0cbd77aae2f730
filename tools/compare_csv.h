// The CSV files of `dumpctl compare`: reading records (statistic.csv, mapping.csv, the --map
// file) and writing the result (-o).
//
// Result CSV (for docs/): header LeftOp,RightOp,TensorIndex,CosineSimilarity,
// MaxAbsoluteError,AccumulatedRelativeError,RelativeEuclideanDistance,
// KullbackLeiblerDivergence,StandardDeviation,MeanAbsoluteError,RootMeanSquareError,DType,
// Shape,Result,Note (the spec's columns first, in its order; dumpd's after them)
// * One row per CompareRow, in the report's order. Numbers are the shortest text that reads
//   back to the same double; NaN is "NaN", infinities "inf" / "-inf".
// * StandardDeviation is "(mean;std)(mean;std)", the left's then the right's.
// * An unmatched side's op is "*" and its metrics NaN. Result is "pass", "fail", "unmatched"
//   (left-only / right-only) or "error".
// * Statistics-only rows carry NaN metrics; the Note holds the values compared:
//   "statistics: Max Value 1.5 vs 1.5; Min Value ...; worst Avg Value 0.02".
// * Fields holding ',', '"', CR or LF are quoted (RFC 4180).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "storage/format/csv.h"
#include "tools/compare_result.h"

namespace dumpd::tools {

using storage::appendCsvField;
using storage::CsvRecord;
using storage::parseCsv;

// The --map file: one "left name,right name" per line, an optional first line "left,right";
// names are sanitised (storage/format/names.h). Errors (kNotFound / kIo / kInvalidArgument) name
// the file and, for a malformed line, its number.
using NameMap = std::unordered_map<std::string, std::string>;
Status readNameMap(const std::string& path, NameMap& map);

// Appends a metric as the CSV writes it ("NaN", "inf", "-inf", or the shortest round-trip
// decimal).
void appendNumber(std::string& out, double value);

// The whole result CSV.
std::string formatCompareCsv(const CompareReport& report);

// Writes `content` to `path` through a temporary file in the same directory and a rename, so a
// reader sees the old file or the whole new one. Errors name the path.
Status writeFileAtomically(const std::string& path, std::string_view content);

}  // namespace dumpd::tools
