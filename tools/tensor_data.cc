#include "tools/tensor_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/dtype_visit.h"
#include "base/element_count.h"
#include "base/unique_fd.h"
#include "storage/format/convert.h"
#include "storage/format/lz4_frame.h"
#include "tools/mapped_file.h"

namespace dumpd::tools {
namespace {

using storage::loadUnaligned;

Error invalid(const std::string& name, const std::string& why) {
  return makeError(ErrorCode::kInvalidArgument, name + ": " + why);
}

bool isComplex(DType t) { return t == DType::kComplex64 || t == DType::kComplex128; }

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

template <typename T>
void decodeAs(const unsigned char* p, uint64_t first, size_t n, double* out) {
  p += first * sizeof(T);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(loadUnaligned<T>(p + i * sizeof(T)));
}

}  // namespace

Result<TensorData> TensorData::open(TensorFileKind kind, const std::string& path, DType dtype,
                                    uint64_t elements, uint64_t offset, uint64_t size) {
  if (kind == TensorFileKind::kNone) return invalid(path, "no tensor file");
  uint64_t file_size = 0;
  auto opened = openRegularFile(path, &file_size);
  if (!opened) return opened.error();
  const UniqueFd& fd = opened.value();
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
    auto mapped = MappedFile::map(fd.get(), static_cast<size_t>(file_size), path);
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
    auto inner = storage::readNpyHeader(path, true);
    if (!inner) return inner.error();
    const uint64_t count = *elementCount(inner->shape);
    const uint64_t expected = inner->data_offset + sourceBytes(inner->dtype, count);
    auto raw = storage::decompressLz4Frames(content, path, expected);
    if (!raw) return raw.error();
    decompressed = std::move(raw.value());
    content = {reinterpret_cast<const std::byte*>(decompressed.get()), expected};
  }
  auto header = storage::parseNpyHeader(content, path);
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
  visitDType(dtype_, Overloaded{
                         [&]<typename T>(DTypeTag<T>) { decodeAs<T>(p, first, n, out); },
                         // `first` and `n` count values: real, imaginary, real, ...
                         [&]<typename T>(ComplexTag<T>) { decodeAs<T>(p, first, n, out); },
                         [&](BoolTag) {
                           for (size_t i = 0; i < n; ++i) out[i] = p[first + i] != 0 ? 1.0 : 0.0;
                         },
                         [&](UInt1Tag) { decodeAs<uint8_t>(p, first, n, out); },  // one byte each
                         [&](Float16Tag) {
                           const unsigned char* q = p + 2 * first;
                           for (size_t i = 0; i < n; ++i) {
                             out[i] = storage::halfToFloat(loadUnaligned<uint16_t>(q + 2 * i));
                           }
                         },
                         [&](BFloat16Tag) {
                           const unsigned char* q = p + 2 * first;
                           for (size_t i = 0; i < n; ++i)
                             out[i] = storage::bf16ToFloat(loadUnaligned<uint16_t>(q + 2 * i));
                         },
                         [&](Int4Tag) {
                           for (size_t i = 0; i < n; ++i) {
                             const uint64_t e = first + i;
                             const uint8_t b = p[e >> 1];
                             out[i] = (e & 1) ? storage::int4High(b) : storage::int4Low(b);
                           }
                         },
                         [](UnknownDType) {},
                     });
}

}  // namespace dumpd::tools
