// CSV as the dump tree and dumpctl use it (RFC 4180): statistic.csv and mapping.csv are
// written and read through here, as are dumpctl compare's --map file and result.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace dumpd::storage {

struct CsvRecord {
  size_t line = 0;  // 1-based line the record starts on
  std::vector<std::string> fields;
};

// RFC 4180: fields separated by ',', a field in double quotes may hold ',', '""' and line
// breaks; records end at LF or CRLF; blank lines give no record. kInvalidArgument naming the
// line when a quoted field is not closed or text follows its closing quote.
Result<std::vector<CsvRecord>> parseCsv(std::string_view text, const std::string& name);

// Appends `field`, quoted when it holds ',', '"', CR or LF.
void appendCsvField(std::string& out, std::string_view field);

}  // namespace dumpd::storage
