// The .npy writer (spec section 6): NPY 1.0 header (2.0 when longer than 65535 bytes),
// padded exactly as numpy.save pads it, then the data; bfloat16 -> float32 and int4 -> int8
// are converted on the way, in chunks; optionally the whole file becomes one LZ4 frame.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/dtype.h"
#include "base/result.h"
#include "storage/file_system.h"

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

}  // namespace dumpd::storage
