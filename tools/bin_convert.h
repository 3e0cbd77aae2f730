// Ascend bin files (storage/format/bin_file.h) to .npy files, as `msaccucmp convert` lays them out:
// one .npy per input and output, named "{bin file name}.{input|output}.{index}.{d0}x{d1}....npy",
// holding exactly what dumpd's own .npy writer (storage/format/npy.h) writes for the same tensor
// (bfloat16 -> float32, int4 -> int8, uint1 -> uint8).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "storage/format/bin_file.h"
#include "storage/fs/file_system.h"

namespace dumpd::tools {

// Appends "{bin_file_name}.{input|output}.{index}.{d0}x{d1}x....npy"; a 0-d tensor has an
// empty dims field ("....output.0..npy"), as msaccucmp's "x".join of an empty shape gives.
void appendConvertedNpyName(std::string& out, std::string_view bin_file_name,
                            const storage::BinTensor& tensor);

// OK when dumpd can decode the tensor (its data type has a dumpd dtype) and its size is what
// its shape and dtype need (elements * element size; int4: ceil(elements / 2)). The error
// (kInvalidArgument) names `file_name`, the tensor ("input 0") and what is wrong.
Status checkConvertibleTensor(const storage::BinTensor& tensor, std::string_view file_name);

// One bin file found by findBinFiles.
struct BinSource {
  std::string path;     // as it can be opened (IN joined with the relative path)
  std::string rel_dir;  // directory beneath IN ("" for IN itself), '/'-separated
  std::string name;     // file name
};

// IN itself when it is not a directory (converted whatever its name), else every regular file
// beneath it whose name parses as a bin file name (storage::parseBinFileName), sorted by path.
// Symbolic links beneath IN are not followed (IN itself is). A directory that cannot be read
// is named on `err` and counted in `*unreadable`; the walk goes on. kNotFound naming IN when
// it does not exist.
Result<std::vector<BinSource>> findBinFiles(const std::string& in, std::ostream& err,
                                            uint64_t* unreadable);

struct ConvertCounts {
  uint64_t files_read = 0;       // bin files whose header parsed
  uint64_t files_rejected = 0;   // could not be opened, or their sizes do not add up
  uint64_t tensors_written = 0;  // .npy files committed
  uint64_t tensors_failed = 0;   // rejected (size, data type) or not written (I/O)
};

// Converts bin file `source` into `out_dir`, one committed (atomic) .npy per tensor with mode
// `mode` (less the umask). Each failure is one line on `err` naming the file (and tensor); the
// other tensors are still converted. Adds to `counts`.
void convertBinFile(const BinSource& source, storage::Directory& out_dir, uint32_t mode,
                    std::ostream& err, ConvertCounts& counts);

}  // namespace dumpd::tools
