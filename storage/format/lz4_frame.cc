#include "storage/format/lz4_frame.h"

#include <fcntl.h>
#include <lz4frame.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"
#include "storage/format/open_for_reading.h"

namespace dumpd::storage {
namespace {

// Input bytes per LZ4 block; matches LZ4F_max256KB.
constexpr size_t kLz4Chunk = size_t{256} << 10;

struct Lz4ContextDeleter {
  void operator()(LZ4F_cctx* c) const { LZ4F_freeCompressionContext(c); }
};

Error compressError(size_t code, const std::string& path) {
  return makeError(ErrorCode::kInternal,
                   "lz4 compression of " + path + ": " + LZ4F_getErrorName(code));
}

Error invalid(const std::string& name, const std::string& why) {
  return makeError(ErrorCode::kInvalidArgument, name + ": " + why);
}

struct Lz4DctxDeleter {
  void operator()(LZ4F_dctx* d) const { LZ4F_freeDecompressionContext(d); }
};
using Lz4Dctx = std::unique_ptr<LZ4F_dctx, Lz4DctxDeleter>;

Result<Lz4Dctx> newDctx(const std::string& name) {
  LZ4F_dctx* d = nullptr;
  size_t rc = LZ4F_createDecompressionContext(&d, LZ4F_VERSION);
  if (LZ4F_isError(rc)) return makeError(ErrorCode::kInternal, name + ": no lz4 context");
  return Lz4Dctx(d);
}

Error lz4Error(const std::string& name, size_t code) {
  return invalid(name, std::string("not a valid LZ4 frame (") + LZ4F_getErrorName(code) + ")");
}

// LZ4 expands a block at most ~255 times; a header promising more than this is a lie.
constexpr uint64_t kLz4MaxRatio = 256;

}  // namespace

Status Lz4FrameWriter::begin() {
  thread_local std::unique_ptr<LZ4F_cctx, Lz4ContextDeleter> ctx = [] {
    LZ4F_cctx* c = nullptr;
    (void)LZ4F_createCompressionContext(&c, LZ4F_VERSION);
    return std::unique_ptr<LZ4F_cctx, Lz4ContextDeleter>(c);
  }();
  if (!ctx) return makeError(ErrorCode::kInternal, "lz4: no compression context");
  ctx_ = ctx.get();
  LZ4F_preferences_t prefs{};
  prefs.frameInfo.blockSizeID = LZ4F_max256KB;
  prefs.frameInfo.blockMode = LZ4F_blockIndependent;
  prefs.frameInfo.contentChecksumFlag = LZ4F_contentChecksumEnabled;
  prefs.frameInfo.contentSize = content_size_;
  // autoFlush 0: the small header shares a block with the data. LZ4F_compressBound counts
  // buffered input, so an update of at most kLz4Chunk bytes always fits in `out`.
  prefs.autoFlush = 0;
  thread_local std::string out;
  out_ = &out;
  out.resize(LZ4F_compressBound(kLz4Chunk, &prefs));
  size_t n = LZ4F_compressBegin(ctx_, out.data(), out.size(), &prefs);
  if (LZ4F_isError(n)) return compressError(n, file_.path());
  return emit(n);
}

Status Lz4FrameWriter::update(ConstBuffer data) {
  while (!data.empty()) {
    size_t len = std::min(data.size(), kLz4Chunk);
    size_t n = LZ4F_compressUpdate(ctx_, out_->data(), out_->size(), data.data(), len, nullptr);
    if (LZ4F_isError(n)) return compressError(n, file_.path());
    if (Status s = emit(n); !s) return s;
    data = data.subspan(len);
  }
  return {};
}

Status Lz4FrameWriter::end() {
  size_t n = LZ4F_compressEnd(ctx_, out_->data(), out_->size(), nullptr);
  if (LZ4F_isError(n)) return compressError(n, file_.path());
  return emit(n);
}

Status Lz4FrameWriter::emit(size_t n) {
  if (n == 0) return {};
  return file_.write(ConstBuffer(reinterpret_cast<const std::byte*>(out_->data()), n));
}

Result<std::shared_ptr<unsigned char[]>> decompressLz4Frames(std::span<const std::byte> src,
                                                             const std::string& name,
                                                             uint64_t expected) {
  auto dctx = newDctx(name);
  if (!dctx) return dctx.error();
  LZ4F_frameInfo_t info{};
  size_t consumed = src.size();
  size_t rc = LZ4F_getFrameInfo(dctx->get(), &info, src.data(), &consumed);
  if (LZ4F_isError(rc)) return lz4Error(name, rc);
  if (info.contentSize != 0 && info.contentSize != expected) {
    return invalid(name, "the LZ4 frame declares " + std::to_string(info.contentSize) +
                             " bytes, its .npy header " + std::to_string(expected));
  }
  if (expected / kLz4MaxRatio > src.size()) {
    return invalid(name, "its .npy header promises " + std::to_string(expected) +
                             " bytes, more than " + std::to_string(src.size()) +
                             " compressed bytes can hold");
  }
  const uint64_t capacity = expected;
  auto buffer = std::make_unique_for_overwrite<unsigned char[]>(std::max<uint64_t>(capacity, 1));
  uint64_t size = 0;
  size_t in = consumed;
  while (in < src.size()) {
    if (size == capacity) return invalid(name, "decompresses to more than its .npy header says");
    size_t out_len = capacity - size;
    size_t in_len = src.size() - in;
    rc = LZ4F_decompress(dctx->get(), buffer.get() + size, &out_len, src.data() + in, &in_len,
                         nullptr);
    if (LZ4F_isError(rc)) return lz4Error(name, rc);
    size += out_len;
    in += in_len;
    if (in_len == 0 && out_len == 0) return invalid(name, "LZ4 frame makes no progress");
  }
  if (rc != 0) return invalid(name, "LZ4 frame is truncated");
  if (size != expected) {
    return invalid(name, "decompresses to " + std::to_string(size) + " bytes, its .npy header " +
                             "says " + std::to_string(expected));
  }
  return std::shared_ptr<unsigned char[]>(std::move(buffer));
}

Result<std::string> readLz4Prefix(const std::string& path, size_t want) {
  auto dctx = newDctx(path);
  if (!dctx) return dctx.error();
  auto opened = openForReading(path);
  if (!opened) return opened.error();
  UniqueFd fd = std::move(opened.value());
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

}  // namespace dumpd::storage
