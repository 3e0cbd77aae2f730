// JSON helpers shared by the job-config and daemon-settings parsers (not a public API).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/printable.h"
#include "base/result.h"

namespace dumpd::config::internal {

// Parses `text` as one JSON value. Never throws. A syntax error becomes kInvalidConfig with
// "JSON syntax error at line L, column C: <what went wrong>" (1-based, columns in bytes).
Result<nlohmann::json> parseJson(std::string_view text);

// 1-based line and column of the byte at 0-based `index` (clamped to text.size(), so the end
// of the input has a position too).
std::pair<size_t, size_t> lineColumn(std::string_view text, size_t index);

using dumpd::printable;  // base/printable.h

// A bounded rendering of a JSON value for error messages: strings unquoted (as MindSpore
// prints them, through printable()), other values as compact JSON cut after a few dozen
// characters. Bounded depth, so a hostile deeply nested value cannot exhaust the stack.
std::string describe(const nlohmann::json& value);

}  // namespace dumpd::config::internal
