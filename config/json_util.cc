#include "config/json_util.h"

#include <cstdio>
#include <exception>

namespace dumpd::config::internal {
namespace {

constexpr size_t kMaxDescribeChars = 64;
constexpr int kMaxDescribeDepth = 3;

// Appends a compact rendering of `v` to `out`, stopping once `out` is long enough.
void describeInto(const nlohmann::json& v, int depth, std::string& out) {
  if (out.size() > kMaxDescribeChars) return;
  if (v.is_string()) {
    out += '"';
    out += printable(v.get_ref<const std::string&>());
    out += '"';
  } else if (v.is_array()) {
    if (depth >= kMaxDescribeDepth) {
      out += "[...]";
      return;
    }
    out += '[';
    bool first = true;
    for (const auto& item : v) {
      if (!first) out += ',';
      first = false;
      if (out.size() > kMaxDescribeChars) break;
      describeInto(item, depth + 1, out);
    }
    out += ']';
  } else if (v.is_object()) {
    if (depth >= kMaxDescribeDepth) {
      out += "{...}";
      return;
    }
    out += '{';
    bool first = true;
    for (const auto& [key, item] : v.items()) {
      if (!first) out += ',';
      first = false;
      if (out.size() > kMaxDescribeChars) break;
      out += '"';
      out += printable(key);
      out += "\":";
      describeInto(item, depth + 1, out);
    }
    out += '}';
  } else {
    out += v.dump();  // scalar: number, boolean or null; never throws for these
  }
}

// nlohmann's what() reads "[json.exception.parse_error.101] parse error at line 3, column 1:
// syntax error while parsing ..."; keep only the part after the position.
std::string parseErrorDetail(const char* what) {
  std::string_view w(what);
  size_t column = w.find("column ");
  size_t colon = column == std::string_view::npos ? w.find("] ") : w.find(": ", column);
  if (colon != std::string_view::npos) w.remove_prefix(colon + 2);
  return printable(w);
}

}  // namespace

std::pair<size_t, size_t> lineColumn(std::string_view text, size_t index) {
  if (index > text.size()) index = text.size();
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < index; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, index - line_start + 1};
}

std::string describe(const nlohmann::json& value) {
  if (value.is_string()) return printable(value.get_ref<const std::string&>());
  std::string out;
  describeInto(value, 0, out);
  if (out.size() > kMaxDescribeChars) {
    out.resize(kMaxDescribeChars);
    out += "...";
  }
  return out;
}

Result<nlohmann::json> parseJson(std::string_view text) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts the bytes read, the offending one included: its index is byte - 1.
    size_t index = e.byte == 0 ? 0 : e.byte - 1;
    auto [line, column] = lineColumn(text, index);
    return makeError(ErrorCode::kInvalidConfig,
                     "JSON syntax error at line " + std::to_string(line) + ", column " +
                         std::to_string(column) + ": " + parseErrorDetail(e.what()));
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInternal, std::string("JSON parser failed: ") + e.what());
  }
}

}  // namespace dumpd::config::internal
