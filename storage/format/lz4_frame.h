// LZ4 frames (the .npy.lz4 files): written by the .npy writer, read back by the offline tools,
// both here. A file is one frame with 256 KiB independent blocks, a content checksum and the
// content size in its header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/result.h"
#include "storage/fs/file_system.h"

struct LZ4F_cctx_s;

namespace dumpd::storage {

// Compresses everything handed to it into one LZ4 frame written to `file`: begin(), any
// number of update()s, end(). The compression context and output buffer are per thread and
// reused, so a warm writer allocates nothing.
//
// Thread-safety: none; one per file, used by the thread that created it.
class Lz4FrameWriter {
 public:
  Lz4FrameWriter(WritableFile& file, uint64_t content_size)
      : file_(file), content_size_(content_size) {}
  Lz4FrameWriter(const Lz4FrameWriter&) = delete;
  Lz4FrameWriter& operator=(const Lz4FrameWriter&) = delete;

  Status begin();
  Status update(ConstBuffer data);
  Status end();

 private:
  Status emit(size_t n);

  WritableFile& file_;
  const uint64_t content_size_;
  LZ4F_cctx_s* ctx_ = nullptr;
  std::string* out_ = nullptr;
};

// Decompresses the whole of `src` (one or more LZ4 frames) into exactly `expected` bytes (what
// the .npy header inside says the file holds): a frame that declares another content size, or
// decompresses to more or less, is refused before anything larger is allocated.
// kInvalidArgument naming `name`.
Result<std::shared_ptr<unsigned char[]>> decompressLz4Frames(std::span<const std::byte> src,
                                                             const std::string& name,
                                                             uint64_t expected);

// The first `want` bytes of the decompressed content of the LZ4 file at `path` (fewer if it is
// shorter). Errors name the path.
Result<std::string> readLz4Prefix(const std::string& path, size_t want);

}  // namespace dumpd::storage
