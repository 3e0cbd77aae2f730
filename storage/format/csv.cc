#include "storage/format/csv.h"

namespace dumpd::storage {

Result<std::vector<CsvRecord>> parseCsv(std::string_view text, const std::string& name) {
  std::vector<CsvRecord> records;
  size_t line = 1;
  size_t i = 0;
  while (i < text.size()) {
    CsvRecord record;
    record.line = line;
    bool end_of_record = false;
    while (!end_of_record) {
      std::string field;
      if (i < text.size() && text[i] == '"') {
        const size_t open_line = line;
        ++i;
        for (;;) {
          if (i >= text.size()) {
            return makeError(
                ErrorCode::kInvalidArgument,
                name + " line " + std::to_string(open_line) + ": a quoted field is not closed");
          }
          const char c = text[i++];
          if (c == '"') {
            if (i < text.size() && text[i] == '"') {
              field.push_back('"');
              ++i;
              continue;
            }
            break;
          }
          if (c == '\n') ++line;
          field.push_back(c);
        }
        // A field ends at ',', LF or CRLF; a lone CR after the quote is text, not an end.
        if (i < text.size() && text[i] != ',' && text[i] != '\n' &&
            !(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
          return makeError(
              ErrorCode::kInvalidArgument,
              name + " line " + std::to_string(line) + ": text after the closing quote of a field");
        }
      } else {
        while (i < text.size() && text[i] != ',' && text[i] != '\n' &&
               !(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
          field.push_back(text[i++]);
        }
      }
      record.fields.push_back(std::move(field));
      if (i >= text.size()) {
        end_of_record = true;
      } else if (text[i] == ',') {
        ++i;
      } else {
        if (text[i] == '\r') ++i;
        ++i;  // '\n'
        ++line;
        end_of_record = true;
      }
    }
    const bool blank = record.fields.size() == 1 && record.fields[0].empty();
    if (!blank) records.push_back(std::move(record));
  }
  return records;
}

void appendCsvField(std::string& out, std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) {
    out.append(field);
    return;
  }
  out.push_back('"');
  for (char c : field) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
}

}  // namespace dumpd::storage
