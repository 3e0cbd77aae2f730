// Names in the dump tree: sanitised name components, tensor file names, and the text forms
// of numbers and shapes used in file names and statistic.csv.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/dtype.h"
#include "config/filter.h"

namespace dumpd::storage {

// Longest file name most file systems take; longer names go through mapping.csv.
inline constexpr size_t kMaxFileNameBytes = 255;

// Appends `name` with each '/', '\\', '.', ' ' (MindSpore's rule) and each control byte
// (dumpd: a NUL or newline must never reach a path) replaced by '_'. An empty name becomes
// "_", so a component is never empty, "." or "..".
void appendSanitized(std::string& out, std::string_view name);
std::string sanitizeName(std::string_view name);

std::string_view ioName(Io io);  // "input" / "output"

void appendDecimal(std::string& out, uint64_t value);

struct TensorFileName {
  std::string_view op_type;  // raw; sanitised here
  std::string_view op_name;  // raw full scope name; sanitised here
  uint32_t task_id = 0;
  uint32_t stream_id = 0;
  uint64_t timestamp_us = 0;
  Io io = Io::kOutput;
  uint32_t slot = 0;
  std::string_view format;  // raw; sanitised here
  DType dtype = DType::kFloat32;
};

// Appends "{op_type}.{op_name}.{task}.{stream}.{ts}", both names sanitised: the stem of an npy
// name, and the whole name of an Ascend bin file.
void appendOpStem(std::string& out, std::string_view op_type, std::string_view op_name,
                  uint32_t task_id, uint32_t stream_id, uint64_t timestamp_us);

// Appends "{op stem}.{io}.{slot}.{format}.{dtype}.npy".
void appendTensorFileName(std::string& out, const TensorFileName& n);

// Appends "[2,3]" ("[3]", "[]" for a scalar).
void appendShape(std::string& out, std::span<const int64_t> shape);
// Appends "(2,3)" ("(3)", "()" for a scalar): MindSpore 2.6's statistic.csv.
void appendShapeParenthesized(std::string& out, std::span<const int64_t> shape);

// Appends `value` exactly as `std::ostream << double` prints it with default flags and
// precision (6 significant digits, %g): 9.53939, 1, 1.23457e+06, inf, -inf, nan.
void appendStatNumber(std::string& out, double value);

// "<random digits>": the base of a file name used when the real one is too long.
std::string randomDigits();

}  // namespace dumpd::storage
