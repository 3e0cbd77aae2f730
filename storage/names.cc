#include "storage/names.h"

#include <charconv>
#include <cmath>
#include <random>

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
