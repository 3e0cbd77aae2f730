// The elements of one dumped tensor, decoded to double on demand, for `dumpctl compare`.
//
// Sources: an .npy file, an .npy.lz4 file (one LZ4 frame of a whole .npy, decompressed once
// into memory), or one tensor's slice of an Ascend bin file. Above 1 MiB the file is mapped and
// read in place; smaller ones are read with one pread (cheaper, and mmap takes a process-wide
// lock that worker threads would contend on). Every dtype decodes to double: bool and integers
// exactly, float16 / bfloat16 / float32 / float64 exactly; int4 is an int8 per element in .npy and
// packed two per byte (low nibble first) in bin files; bfloat16 is float32 in .npy and raw bfloat16
// in bin files. Complex tensors decode as 2n doubles: real and imaginary part of each element in
// turn, so a comparison treats them as a flattened sequence of 2n reals.
//
// Thread-safety: decode() is const and touches no shared state; one TensorData may be read by
// many threads at once (a large pair is split into chunks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/result.h"
#include "storage/format/names.h"
#include "storage/format/npy.h"
#include "tools/mapped_file.h"

namespace dumpd::tools {

using storage::NpyHeader;
using storage::parseNpyHeader;
using storage::readNpyHeader;

// What is known of a tensor's values without its elements: a statistic.csv row, or what
// computeStatistics (tools/compare_metrics.h) finds. nullopt where the row lacks the column.
struct StatisticValues {
  std::optional<double> max, min, avg, l2norm;
};

using storage::TensorFileKind;

class TensorData {
 public:
  // Opens `path`. For kBin, `dtype`, `elements`, `offset` and `size` say where the tensor lies
  // in the file (from its header: see storage/format/bin_file.h); for npy they are ignored and the
  // header decides. Errors name the path: unreadable, truncated, undecodable dtype.
  static Result<TensorData> open(TensorFileKind kind, const std::string& path, DType dtype = {},
                                 uint64_t elements = 0, uint64_t offset = 0, uint64_t size = 0);
  // A view of `bytes` holding `elements` elements encoded as `dtype` (bin encoding: bfloat16
  // raw, int4 packed). REQUIRES: `bytes` outlives the TensorData and holds them all.
  static TensorData view(DType dtype, std::span<const std::byte> bytes, uint64_t elements);

  TensorData() = default;

  DType dtype() const { return dtype_; }
  uint64_t elements() const { return elements_; }
  // Values decode() yields: elements(), twice that for complex.
  uint64_t values() const { return values_; }
  // Bytes of the file read for this tensor (compressed size for .npy.lz4).
  uint64_t bytesRead() const { return bytes_read_; }

  // Writes values [first, first + count) to `out`. REQUIRES: first + count <= values().
  void decode(uint64_t first, size_t count, double* out) const;
  // The mapped file shrank while it was read (tools/mapped_file.h): decoded values past its
  // new end were zeros. Check once the reads are done.
  bool shrank() const { return file_ != nullptr && file_->shrank(); }

 private:
  DType dtype_ = DType::kFloat32;
  const unsigned char* data_ = nullptr;
  uint64_t elements_ = 0;
  uint64_t values_ = 0;
  uint64_t bytes_read_ = 0;
  std::shared_ptr<const MappedFile> file_;        // a large file, mapped
  std::shared_ptr<const unsigned char[]> owned_;  // a small file read, or a decompressed .lz4
};

}  // namespace dumpd::tools
