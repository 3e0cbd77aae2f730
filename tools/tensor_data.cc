#include "tools/tensor_data.h"

#include <fcntl.h>
#include <lz4frame.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "base/element_count.h"
#include "base/unique_fd.h"
#include "storage/convert.h"

namespace dumpd::tools {
namespace {

using storage::loadUnaligned;

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

bool isComplex(DType t) { return t == DType::kComplex64 || t == DType::kComplex128; }

struct Lz4DctxDeleter {
  void operator()(LZ4F_dctx* d) const { LZ4F_freeDecompressionContext(d); }
};
using Lz4Dctx = std::unique_ptr<LZ4F_dctx, Lz4DctxDeleter>;

Result<Lz4Dctx> newDctx(const std::string& path) {
  LZ4F_dctx* d = nullptr;
  size_t rc = LZ4F_createDecompressionContext(&d, LZ4F_VERSION);
  if (LZ4F_isError(rc)) return makeError(ErrorCode::kInternal, path + ": no lz4 context");
  return Lz4Dctx(d);
}

Error lz4Error(const std::string& path, size_t code) {
  return invalid(path, std::string("not a valid LZ4 frame (") + LZ4F_getErrorName(code) + ")");
}

// LZ4 expands a block at most ~255 times; a header promising more than this is a lie.
constexpr uint64_t kLz4MaxRatio = 256;

// Decompresses the whole of `src` (one or more LZ4 frames) into exactly `expected` bytes (what
// the .npy header inside says the file holds): a frame that declares another content size, or
// decompresses to more or less, is refused before anything larger is allocated.
Result<std::shared_ptr<unsigned char[]>> decompressAll(std::span<const std::byte> src,
                                                       const std::string& path, uint64_t expected) {
  auto dctx = newDctx(path);
  if (!dctx) return dctx.error();
  LZ4F_frameInfo_t info{};
  size_t consumed = src.size();
  size_t rc = LZ4F_getFrameInfo(dctx->get(), &info, src.data(), &consumed);
  if (LZ4F_isError(rc)) return lz4Error(path, rc);
  if (info.contentSize != 0 && info.contentSize != expected) {
    return invalid(path, "the LZ4 frame declares " + std::to_string(info.contentSize) +
                             " bytes, its .npy header " + std::to_string(expected));
  }
  if (expected / kLz4MaxRatio > src.size()) {
    return invalid(path, "its .npy header promises " + std::to_string(expected) +
                             " bytes, more than " + std::to_string(src.size()) +
                             " compressed bytes can hold");
  }
  const uint64_t capacity = expected;
  auto buffer = std::make_unique_for_overwrite<unsigned char[]>(std::max<uint64_t>(capacity, 1));
  uint64_t size = 0;
  size_t in = consumed;
  while (in < src.size()) {
    if (size == capacity) return invalid(path, "decompresses to more than its .npy header says");
    size_t out_len = capacity - size;
    size_t in_len = src.size() - in;
    rc = LZ4F_decompress(dctx->get(), buffer.get() + size, &out_len, src.data() + in, &in_len,
                         nullptr);
    if (LZ4F_isError(rc)) return lz4Error(path, rc);
    size += out_len;
    in += in_len;
    if (in_len == 0 && out_len == 0) return invalid(path, "LZ4 frame makes no progress");
  }
  if (rc != 0) return invalid(path, "LZ4 frame is truncated");
  if (size != expected) {
    return invalid(path, "decompresses to " + std::to_string(size) + " bytes, its .npy header " +
                             "says " + std::to_string(expected));
  }
  return std::shared_ptr<unsigned char[]>(std::move(buffer));
}

Result<std::string> readPrefix(const std::string& path, size_t want) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) {
    return makeError(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                     "cannot open " + path + ": " + std::strerror(errno));
  }
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

// The first `want` bytes of the decompressed content of an .npy.lz4 (fewer if it is shorter).
Result<std::string> readLz4Prefix(const std::string& path, size_t want) {
  auto dctx = newDctx(path);
  if (!dctx) return dctx.error();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) {
    return makeError(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                     "cannot open " + path + ": " + std::strerror(errno));
  }
  std::string out(want, '\0');
  size_t got = 0;
  char chunk[16384];
  while (got < want) {
    ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return makeError(ErrorCode::kIo, "cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    size_t in = 0;
    while (in < static_cast<size_t>(n) && got < want) {
      size_t out_len = want - got;
      size_t in_len = static_cast<size_t>(n) - in;
      size_t rc =
          LZ4F_decompress(dctx->get(), out.data() + got, &out_len, chunk + in, &in_len, nullptr);
      if (LZ4F_isError(rc)) return lz4Error(path, rc);
      got += out_len;
      in += in_len;
      if (rc == 0 || (in_len == 0 && out_len == 0)) break;
    }
  }
  out.resize(got);
  return out;
}

// Files (and bin slices) up to this size are read with pread rather than mapped: cheaper for
// small tensors, and mmap/munmap take a process-wide lock the worker threads would share.
constexpr uint64_t kReadLimit = uint64_t{1} << 20;

Result<std::shared_ptr<const unsigned char[]>> readRange(int fd, uint64_t offset, uint64_t size,
                                                         const std::string& path) {
  auto buffer = std::make_unique_for_overwrite<unsigned char[]>(std::max<uint64_t>(size, 1));
  uint64_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd, buffer.get() + got, size - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return makeError(ErrorCode::kIo, "cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) return invalid(path, "the file shrank while being read");
    got += static_cast<uint64_t>(n);
  }
  return std::shared_ptr<const unsigned char[]>(std::move(buffer));
}

std::span<const std::byte> asSpan(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

template <typename T>
void decodeAs(const unsigned char* p, uint64_t first, size_t n, double* out) {
  p += first * sizeof(T);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(loadUnaligned<T>(p + i * sizeof(T)));
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

Result<TensorData> TensorData::open(TensorFileKind kind, const std::string& path, DType dtype,
                                    uint64_t elements, uint64_t offset, uint64_t size) {
  if (kind == TensorFileKind::kNone) return invalid(path, "no tensor file");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return makeError(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                     "cannot open " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return invalid(path, "not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (kind != TensorFileKind::kBin) {
    offset = 0;
    size = file_size;
  } else if (offset > file_size || size > file_size - offset) {
    return invalid(path, "tensor at offset " + std::to_string(offset) + " size " +
                             std::to_string(size) + " is past the end of the file");
  } else if (elements > kMaxElements || sourceBytes(dtype, elements) != size) {
    // Exactly, as dumpctl convert requires: a size that disagrees with the shape is a lie.
    return invalid(path, "tensor of " + std::to_string(elements) + " " +
                             std::string(dtypeName(dtype)) + " elements in " +
                             std::to_string(size) + " bytes: its size and shape disagree");
  }
  TensorData t;
  std::span<const std::byte> content;
  if (size <= kReadLimit) {
    auto read = readRange(fd.get(), offset, size, path);
    if (!read) return read.error();
    t.owned_ = std::move(read.value());
    content = {reinterpret_cast<const std::byte*>(t.owned_.get()), size};
  } else {
    auto mapped = MappedFile::open(path);
    if (!mapped) return mapped.error();
    if (mapped->size() < offset + size) return invalid(path, "the file shrank while being read");
    t.file_ = std::make_shared<const MappedFile>(std::move(mapped.value()));
    t.file_->adviseSequential();
    content = t.file_->bytes().subspan(offset, size);
  }
  if (kind == TensorFileKind::kBin) {
    TensorData v = view(dtype, content, elements);
    v.owned_ = std::move(t.owned_);
    v.file_ = std::move(t.file_);
    return v;
  }
  std::shared_ptr<const unsigned char[]> decompressed;
  if (kind == TensorFileKind::kNpyLz4) {
    // The header first (a few KiB decompressed), so the whole is never larger than it says.
    auto inner = readNpyHeader(path, true);
    if (!inner) return inner.error();
    const uint64_t count = *elementCount(inner->shape);
    const uint64_t expected = inner->data_offset + sourceBytes(inner->dtype, count);
    auto raw = decompressAll(content, path, expected);
    if (!raw) return raw.error();
    decompressed = std::move(raw.value());
    content = {reinterpret_cast<const std::byte*>(decompressed.get()), expected};
  }
  auto header = parseNpyHeader(content, path);
  if (!header) return header.error();
  const uint64_t count = *elementCount(header->shape);
  const uint64_t need = sourceBytes(header->dtype, count);
  if (need > content.size() - header->data_offset) {
    return invalid(path, "truncated: the header promises " + std::to_string(need) +
                             " data bytes, the file holds " +
                             std::to_string(content.size() - header->data_offset));
  }
  TensorData v = view(header->dtype, content.subspan(header->data_offset), count);
  v.owned_ = decompressed ? std::move(decompressed) : std::move(t.owned_);
  v.file_ = std::move(t.file_);
  v.bytes_read_ = file_size;
  return v;
}

TensorData TensorData::view(DType dtype, std::span<const std::byte> bytes, uint64_t elements) {
  TensorData t;
  t.dtype_ = dtype;
  t.data_ = reinterpret_cast<const unsigned char*>(bytes.data());
  t.elements_ = elements;
  t.values_ = isComplex(dtype) ? elements * 2 : elements;
  t.bytes_read_ = bytes.size();
  return t;
}

void TensorData::decode(uint64_t first, size_t n, double* out) const {
  const unsigned char* p = data_;
  switch (dtype_) {
    case DType::kBool:
      for (size_t i = 0; i < n; ++i) out[i] = p[first + i] != 0 ? 1.0 : 0.0;
      break;
    case DType::kUInt1:  // one byte per element
    case DType::kUInt8:
      decodeAs<uint8_t>(p, first, n, out);
      break;
    case DType::kInt8:
      decodeAs<int8_t>(p, first, n, out);
      break;
    case DType::kInt16:
      decodeAs<int16_t>(p, first, n, out);
      break;
    case DType::kUInt16:
      decodeAs<uint16_t>(p, first, n, out);
      break;
    case DType::kInt32:
      decodeAs<int32_t>(p, first, n, out);
      break;
    case DType::kUInt32:
      decodeAs<uint32_t>(p, first, n, out);
      break;
    case DType::kInt64:
      decodeAs<int64_t>(p, first, n, out);
      break;
    case DType::kUInt64:
      decodeAs<uint64_t>(p, first, n, out);
      break;
    case DType::kFloat32:
    case DType::kComplex64:  // real, imaginary, real, ...
      decodeAs<float>(p, first, n, out);
      break;
    case DType::kFloat64:
    case DType::kComplex128:
      decodeAs<double>(p, first, n, out);
      break;
    case DType::kFloat16: {
      const unsigned char* q = p + 2 * first;
      for (size_t i = 0; i < n; ++i) {
        out[i] = storage::halfToFloat(loadUnaligned<uint16_t>(q + 2 * i));
      }
      break;
    }
    case DType::kBFloat16: {
      const unsigned char* q = p + 2 * first;
      for (size_t i = 0; i < n; ++i)
        out[i] = storage::bf16ToFloat(loadUnaligned<uint16_t>(q + 2 * i));
      break;
    }
    case DType::kInt4:
      for (size_t i = 0; i < n; ++i) {
        const uint64_t e = first + i;
        const uint8_t b = p[e >> 1];
        out[i] = (e & 1) ? storage::int4High(b) : storage::int4Low(b);
      }
      break;
  }
}

}  // namespace dumpd::tools
