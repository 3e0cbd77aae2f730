// .npy files (spec section 6), written (npy.cc) and read back (npy_read.cc) here.
//
// The writer: NPY 1.0 header (2.0 when longer than 65535 bytes), padded exactly as numpy.save
// pads it, then the data; bfloat16 -> float32 and int4 -> int8 are converted on the way, in
// chunks; optionally the whole file becomes one LZ4 frame (storage/format/lz4_frame.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/result.h"
#include "storage/fs/file_system.h"

namespace dumpd::storage {

// Replaces `out` with the preamble (magic, version, header length) and header of an .npy
// holding `dtype` (a source dtype: its stored dtype is used) with `shape`.
void buildNpyHeader(std::string& out, DType dtype, std::span<const int64_t> shape);

// True for the source dtypes whose bytes differ in the file (bfloat16, int4).
bool needsConversion(DType dtype);

struct NpyPayload {
  DType dtype = DType::kFloat32;   // source dtype
  std::span<const int64_t> shape;  // shape in the file
  uint64_t elements = 0;           // product of `shape`: the leading elements of `data` written
  ConstBuffer data;                // REQUIRES: size >= sourceBytes(dtype, elements)
};

// Size of the uncompressed .npy.
uint64_t npyFileSize(const NpyPayload& payload, uint64_t header_size);

// Writes the .npy into `file`, as an LZ4 frame when `lz4`: `header` (from buildNpyHeader for
// the payload's dtype and shape) then the data, straight from `payload.data` (one writev with
// the header) unless converting or compressing.
Status writeNpy(WritableFile& file, const NpyPayload& payload, std::string_view header, bool lz4);

// --- Reading ---

// The header of an .npy file.
struct NpyHeader {
  DType dtype = DType::kFloat32;  // element encoding (descr); never bfloat16 / int4 / uint1
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // of the first element
};

// Parses the preamble and header dict of an .npy (versions 1.0, 2.0, 3.0). `bytes` may be just
// the file's beginning: kInvalidArgument when it ends inside the header, naming `name` as for
// any other fault (bad magic, unknown or big-endian descr, fortran_order True, bad shape).
Result<NpyHeader> parseNpyHeader(std::span<const std::byte> bytes, const std::string& name);

// Reads just the header of an .npy or .npy.lz4 file (the first kilobytes, decompressed when
// `lz4`). Errors name `path`.
Result<NpyHeader> readNpyHeader(const std::string& path, bool lz4);

}  // namespace dumpd::storage
