#include "storage/format/names.h"

#include <charconv>
#include <cmath>
#include <random>

#include "storage/format/bin_file.h"

namespace dumpd::storage {

void appendSanitized(std::string& out, std::string_view name) {
  if (name.empty()) {
    out.push_back('_');
    return;
  }
  size_t start = out.size();
  out.append(name);
  for (size_t i = start; i < out.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(out[i]);
    if (c == '/' || c == '\\' || c == '.' || c == ' ' || c < 0x20 || c == 0x7f) out[i] = '_';
  }
}

std::string sanitizeName(std::string_view name) {
  std::string out;
  appendSanitized(out, name);
  return out;
}

std::string_view ioName(Io io) { return io == Io::kInput ? "input" : "output"; }

void appendDecimal(std::string& out, uint64_t value) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}

void appendOpStem(std::string& out, std::string_view op_type, std::string_view op_name,
                  uint32_t task_id, uint32_t stream_id, uint64_t timestamp_us) {
  appendSanitized(out, op_type);
  out.push_back('.');
  appendSanitized(out, op_name);
  out.push_back('.');
  appendDecimal(out, task_id);
  out.push_back('.');
  appendDecimal(out, stream_id);
  out.push_back('.');
  appendDecimal(out, timestamp_us);
}

void appendTensorFileName(std::string& out, const TensorFileName& n) {
  appendOpStem(out, n.op_type, n.op_name, n.task_id, n.stream_id, n.timestamp_us);
  out.push_back('.');
  out.append(ioName(n.io));
  out.push_back('.');
  appendDecimal(out, n.slot);
  out.push_back('.');
  appendSanitized(out, n.format);
  out.push_back('.');
  out.append(dtypeName(n.dtype));
  out.append(".npy");
}

namespace {

void appendDims(std::string& out, std::span<const int64_t> shape, char open, char close) {
  out.push_back(open);
  char buf[24];
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out.push_back(',');
    auto r = std::to_chars(buf, buf + sizeof buf, shape[i]);
    out.append(buf, r.ptr);
  }
  out.push_back(close);
}

}  // namespace

void appendShape(std::string& out, std::span<const int64_t> shape) {
  appendDims(out, shape, '[', ']');
}

void appendShapeParenthesized(std::string& out, std::span<const int64_t> shape) {
  appendDims(out, shape, '(', ')');
}

void appendStatNumber(std::string& out, double value) {
  // libstdc++ formats a double with "%.*g" and precision 6; std::to_chars in general format
  // with a precision is specified to print the same digits (and is locale independent).
  // NaN is printed without a sign: MindSpore's statistics never carry a negative NaN.
  if (std::isnan(value)) {
    out.append("nan");
    return;
  }
  if (std::isinf(value)) {
    out.append(value < 0 ? "-inf" : "inf");
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::general, 6);
  out.append(buf, r.ptr);
}

std::string randomDigits() {
  thread_local std::mt19937_64 engine{std::random_device{}()};
  // 1e15..1e16-1: always 16 digits, so every mapped name has the same short length.
  std::uniform_int_distribution<uint64_t> dist(1000000000000000ull, 9999999999999999ull);
  return std::to_string(dist(engine));
}

}  // namespace dumpd::storage

// --- Reading names back ---

namespace dumpd::storage {
namespace {

std::string joinSanitized(const std::vector<std::string_view>& parts, size_t first, size_t last) {
  std::string out;
  for (size_t i = first; i < last; ++i) {
    if (i > first) out.push_back('.');
    out.append(parts[i]);
  }
  return sanitizeName(out);
}

// The npy name without ".npy": MindSpore's {type}.{name}.{task}.{stream}.{ts}.{io}.{slot}.
// {format}.{dtype}, or msaccucmp's {type}.{name}.{task}.{stream}.{ts}.{io}.{index}.{shape}.
bool parseNpyName(std::string_view base, ParsedFileName& f) {
  auto parts = splitAt(base, '.');
  const size_t n = parts.size();
  for (size_t tail : {size_t{4}, size_t{3}}) {  // fields after the slot's io: 4 or 3
    if (n < tail + 5) continue;
    const size_t io_at = n - tail;
    if (!parseIoName(parts[io_at], f.io) || !parseDecimal(parts[io_at + 1], f.slot) ||
        !parseDecimal(parts[io_at - 1], f.timestamp) ||
        !parseDecimal(parts[io_at - 2], f.stream_id) ||
        !parseDecimal(parts[io_at - 3], f.task_id)) {
      continue;
    }
    f.op_type = sanitizeName(parts[0]);
    f.op_name = joinSanitized(parts, 1, io_at - 3);
    f.dtype = tail == 4 ? std::string(parts[n - 1]) : std::string();
    return true;
  }
  return false;
}

}  // namespace

std::vector<std::string_view> splitAt(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    size_t at = s.find(sep);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

bool parseIoName(std::string_view s, Io& io) {
  if (s == "input") {
    io = Io::kInput;
  } else if (s == "output") {
    io = Io::kOutput;
  } else {
    return false;
  }
  return true;
}

std::optional<std::vector<int64_t>> parseShapeText(std::string_view s) {
  if (s.size() < 2 ||
      !((s.front() == '[' && s.back() == ']') || (s.front() == '(' && s.back() == ')'))) {
    return std::nullopt;
  }
  std::vector<int64_t> shape;
  for (std::string_view item : splitAt(s.substr(1, s.size() - 2), ',')) {
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    int64_t d = 0;
    if (!parseDecimal(item, d) || d < 0) return std::nullopt;
    shape.push_back(d);
  }
  return shape;
}

std::optional<ParsedFileName> parseTensorFileName(std::string_view name) {
  ParsedFileName f;
  constexpr std::string_view kLz4 = ".npy.lz4", kNpy = ".npy";
  if (name.ends_with(kLz4) || name.ends_with(kNpy)) {
    const bool lz4 = name.ends_with(kLz4);
    f.kind = lz4 ? TensorFileKind::kNpyLz4 : TensorFileKind::kNpy;
    name.remove_suffix(lz4 ? kLz4.size() : kNpy.size());
    if (!parseNpyName(name, f)) return std::nullopt;
    return f;
  }
  auto bin = parseBinFileName(name);
  if (!bin) return std::nullopt;
  f.kind = TensorFileKind::kBin;
  f.op_type = sanitizeName(bin->op_type);
  f.op_name = sanitizeName(bin->op_name);
  f.task_id = bin->task_id;
  f.stream_id = bin->stream_id;
  f.timestamp = bin->timestamp;
  return f;
}

}  // namespace dumpd::storage
