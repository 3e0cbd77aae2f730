// Names in the dump tree: sanitised name components, tensor file names, and the text forms
// of numbers and shapes used in file names and statistic.csv. Written here, and read back here
// (parseTensorFileName, parseShapeText) by the offline tools.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

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

// --- Reading names back ---

// The whole of `s` as a decimal number (for double: what from_chars accepts); false when
// empty, malformed, out of range or followed by anything.
template <typename T>
bool parseDecimal(std::string_view s, T& out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// The pieces of `s` between each `sep` (one piece when there is none; empty pieces kept).
std::vector<std::string_view> splitAt(std::string_view s, char sep);

// "input" / "output" (the inverse of ioName).
bool parseIoName(std::string_view s, Io& io);

// "[2,3]", "(2,3)", "(3)", "(3,)", "[]", "()": the dimensions (the inverse of appendShape and
// appendShapeParenthesized, plus numpy's tuple text); nullopt when malformed or negative.
std::optional<std::vector<int64_t>> parseShapeText(std::string_view s);

// Where a tensor's bytes are, as its file name says.
enum class TensorFileKind : uint8_t {
  kNone,    // no file: statistics only
  kNpy,     // .npy
  kNpyLz4,  // .npy.lz4
  kBin,     // a slice of an Ascend bin file
};

struct ParsedFileName {
  TensorFileKind kind = TensorFileKind::kNone;
  std::string op_type, op_name;  // sanitised (a name is never read back unsanitised)
  std::string dtype;             // "float32"; "" when the name carries none
  uint32_t task_id = 0, stream_id = 0, slot = 0;
  uint64_t timestamp = 0;
  Io io = Io::kOutput;  // npy names; bin files hold both
};

// Reads a tensor file's name: {op_type}.{op_name}.{task}.{stream}.{ts}.{io}.{slot}.{format}.
// {dtype}.npy[.lz4] (MindSpore, dumpd), {op_type}.{op_name}.{task}.{stream}.{ts}.{io}.{slot}.
// {shape}.npy (msaccucmp, dumpctl convert) and bin files {op_type}.{op_name}.{task}.{stream}.
// {ts}. The op name may hold dots (the fields are found from both ends). nullopt for any other
// name.
std::optional<ParsedFileName> parseTensorFileName(std::string_view name);

}  // namespace dumpd::storage
