// Reading .npy headers back (storage/format/npy.h); the writer is npy.cc.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "base/element_count.h"
#include "base/unique_fd.h"
#include "storage/format/convert.h"
#include "storage/format/lz4_frame.h"
#include "storage/format/npy.h"
#include "storage/format/open_for_reading.h"

namespace dumpd::storage {
namespace {

constexpr std::string_view kNpyMagic = "\x93NUMPY";

Error invalid(const std::string& name, const std::string& why) {
  return makeError(ErrorCode::kInvalidArgument, name + ": " + why);
}

std::optional<DType> dtypeFromDescr(std::string_view descr) {
  if (descr.size() < 2) return std::nullopt;
  const char order = descr[0];
  std::string_view code = descr.substr(1);
  const bool one_byte = code == "b1" || code == "i1" || code == "u1";
  // '>' is big-endian: only single-byte types read the same.
  if (order != '<' && order != '|' && order != '=' && !(order == '>' && one_byte)) {
    return std::nullopt;
  }
  struct Code {
    std::string_view code;
    DType dtype;
  };
  static constexpr Code kCodes[] = {
      {"b1", DType::kBool},      {"i1", DType::kInt8},        {"u1", DType::kUInt8},
      {"i2", DType::kInt16},     {"u2", DType::kUInt16},      {"i4", DType::kInt32},
      {"u4", DType::kUInt32},    {"i8", DType::kInt64},       {"u8", DType::kUInt64},
      {"f2", DType::kFloat16},   {"f4", DType::kFloat32},     {"f8", DType::kFloat64},
      {"c8", DType::kComplex64}, {"c16", DType::kComplex128},
  };
  for (const Code& c : kCodes) {
    if (c.code == code) return c.dtype;
  }
  return std::nullopt;
}

// The text after `'key':` in the header dict, leading spaces skipped; empty when absent.
std::string_view dictValue(std::string_view dict, std::string_view key) {
  for (char quote : {'\'', '"'}) {
    std::string pattern;
    pattern.push_back(quote);
    pattern.append(key);
    pattern.push_back(quote);
    size_t at = dict.find(pattern);
    if (at == std::string_view::npos) continue;
    std::string_view rest = dict.substr(at + pattern.size());
    size_t colon = rest.find_first_not_of(' ');
    if (colon == std::string_view::npos || rest[colon] != ':') return {};
    rest = rest.substr(colon + 1);
    size_t start = rest.find_first_not_of(' ');
    return start == std::string_view::npos ? std::string_view{} : rest.substr(start);
  }
  return {};
}

// "(2, 3)", "(2,3,)", "(3,)", "()": the dimensions; nullopt when malformed.
std::optional<std::vector<int64_t>> parseShapeTuple(std::string_view text) {
  if (text.empty() || text[0] != '(') return std::nullopt;
  size_t close = text.find(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view inner = text.substr(1, close - 1);
  std::vector<int64_t> shape;
  while (!inner.empty()) {
    size_t comma = inner.find(',');
    std::string_view item = inner.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == 'L')) item.remove_suffix(1);
    if (!item.empty()) {
      int64_t dim = 0;
      auto r = std::from_chars(item.data(), item.data() + item.size(), dim);
      if (r.ec != std::errc() || r.ptr != item.data() + item.size() || dim < 0) {
        return std::nullopt;
      }
      shape.push_back(dim);
    } else if (comma != std::string_view::npos && shape.empty()) {
      return std::nullopt;  // "(,)"
    }
    if (comma == std::string_view::npos) break;
    inner.remove_prefix(comma + 1);
  }
  return shape;
}

Result<std::string> readPrefix(const std::string& path, size_t want) {
  auto opened = openForReading(path);
  if (!opened) return opened.error();
  UniqueFd fd = std::move(opened.value());
  std::string out(want, '\0');
  size_t got = 0;
  while (got < want) {
    ssize_t n = ::pread(fd.get(), out.data() + got, want - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return makeError(ErrorCode::kIo, "cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

std::span<const std::byte> asSpan(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

Result<NpyHeader> parseNpyHeader(std::span<const std::byte> bytes, const std::string& name) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (text.size() < 10 || text.substr(0, 6) != kNpyMagic) {
    return invalid(name, "not an .npy file (no \\x93NUMPY magic)");
  }
  const auto major = static_cast<unsigned char>(text[6]);
  size_t preamble = 0;
  uint64_t header_len = 0;
  if (major == 1) {
    preamble = 10;
    header_len = loadUnaligned<uint16_t>(reinterpret_cast<const unsigned char*>(text.data() + 8));
  } else if (major == 2 || major == 3) {
    if (text.size() < 12) return invalid(name, ".npy header is truncated");
    preamble = 12;
    header_len = loadUnaligned<uint32_t>(reinterpret_cast<const unsigned char*>(text.data() + 8));
  } else {
    return invalid(name, ".npy version " + std::to_string(major) + " is not supported");
  }
  if (header_len > text.size() - preamble) return invalid(name, ".npy header is truncated");
  std::string_view dict = text.substr(preamble, header_len);
  NpyHeader h;
  h.data_offset = preamble + header_len;
  std::string_view descr = dictValue(dict, "descr");
  if (descr.empty() || (descr[0] != '\'' && descr[0] != '"')) {
    return invalid(name, ".npy header has no 'descr'");
  }
  descr = descr.substr(1, descr.find(descr[0], 1) - 1);
  std::optional<DType> dtype = dtypeFromDescr(descr);
  if (!dtype) return invalid(name, ".npy dtype '" + std::string(descr) + "' is not supported");
  h.dtype = *dtype;
  std::string_view fortran = dictValue(dict, "fortran_order");
  if (fortran.substr(0, 5) != "False") {
    return invalid(name, ".npy with fortran_order other than False is not supported");
  }
  auto shape = parseShapeTuple(dictValue(dict, "shape"));
  if (!shape) return invalid(name, ".npy header has no valid 'shape'");
  if (!elementCount(*shape)) return invalid(name, ".npy shape is too large");
  h.shape = std::move(*shape);
  return h;
}

// Longest .npy header read (numpy writes a few hundred bytes; version 1 allows 64 KiB).
constexpr uint64_t kMaxNpyHeader = uint64_t{1} << 20;

Result<NpyHeader> readNpyHeader(const std::string& path, bool lz4) {
  // Version 1 headers are at most 10 + 65535 bytes; 4 KiB covers every realistic one.
  size_t want = 4096;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto prefix = lz4 ? readLz4Prefix(path, want) : readPrefix(path, want);
    if (!prefix) return prefix.error();
    auto header = parseNpyHeader(asSpan(*prefix), path);
    if (header || prefix->size() < want || prefix->size() < 12) return header;
    // A long header: read as much as its length field says, when the preamble is one and the
    // length is sane (numpy itself writes headers of a few hundred bytes).
    const auto* p = reinterpret_cast<const unsigned char*>(prefix->data());
    if (std::memcmp(p, kNpyMagic.data(), kNpyMagic.size()) != 0 || p[6] < 1 || p[6] > 3) {
      return header;
    }
    const uint64_t full =
        p[6] == 1 ? 10 + loadUnaligned<uint16_t>(p + 8) : 12 + loadUnaligned<uint32_t>(p + 8);
    if (full <= want) return header;  // the header was all there: it is bad, not cut short
    if (full > kMaxNpyHeader)
      return invalid(path, ".npy header of " + std::to_string(full) + " bytes is too long");
    want = full;
  }
  return invalid(path, ".npy header is truncated");
}

}  // namespace dumpd::storage
