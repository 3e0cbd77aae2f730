// The Ascend dump "bin" file (shared/spec/ascend-bin-format.md), version "2.0":
//   [uint64 LE header_len][DumpData, every `data` empty, every `size` set][raw bytes of the
//   inputs, then the outputs, then the buffers, in header order]
// The writer side builds the header; the raw bytes are written by the caller from where they
// lie (the daemon's ring), in one writev with it. The reader side checks that the sizes add up
// and says where each tensor's bytes are; `dumpctl convert` and `dumpctl compare` use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/io.h"
#include "base/result.h"

namespace dumpd::storage {

inline constexpr std::string_view kBinVersion = "2.0";
// The length prefix before the header.
inline constexpr size_t kBinLengthBytes = 8;

// OutputDataType of a dumpd dtype (DT_FLOAT = 1, DT_BF16 = 27, DT_INT4 = 28 packed two per
// byte low nibble first, DT_UINT1 = 29 one byte per element as dumpd carries it).
int binDataType(DType t);
// The dumpd dtype of an OutputDataType; nullopt for the ones dumpd cannot decode (strings,
// quantised, dual, int2/uint2, ...).
std::optional<DType> dtypeFromBinDataType(int data_type);
// "DT_FLOAT", ... ("DT_<number>" for values outside the spec's table).
std::string binDataTypeName(int data_type);

// OutputFormat of a producer's format string: the spec's names without "FORMAT_" ("NCHW",
// "FRACTAL_NZ", ...), case-sensitive. "DefaultFormat", "" and names outside the table are
// FORMAT_ND (2): dumpd documents ND as the format of a tensor it knows no layout of.
int binFormat(std::string_view format);
// "NCHW", "ND", ...; "FORMAT_<number>" outside the table.
std::string binFormatName(int format);

struct BinTensorSpec {
  Io io = Io::kOutput;
  DType dtype = DType::kFloat32;
  std::span<const int64_t> shape;  // logical shape (int4: elements, not bytes)
  std::string_view format;         // producer's format string (see binFormat)
  uint64_t size = 0;               // bytes that follow the header for this tensor
};

// Replaces `out` with the 8-byte length and the serialized DumpData (version "2.0",
// dump_time, op_name, one OpInput/OpOutput per tensor, inputs and outputs each in the order
// given). The raw bytes must then follow in the order: every input, then every output.
void buildBinHeader(std::string& out, std::string_view op_name, uint64_t dump_time_us,
                    std::span<const BinTensorSpec> tensors);

struct BinTensor {
  Io io = Io::kOutput;
  uint32_t index = 0;          // position among the file's inputs (or outputs)
  int data_type = 0;           // OutputDataType as written
  std::optional<DType> dtype;  // dtypeFromBinDataType(data_type)
  int format = 2;              // OutputFormat as written
  std::vector<int64_t> shape;  // as written (dims above INT64_MAX are refused)
  uint64_t offset = 0;         // of the first byte in the file
  uint64_t size = 0;           // bytes
};

struct BinFile {
  std::string version;
  uint64_t dump_time = 0;
  std::string op_name;
  // Inputs (in header order), then outputs: the order of their bytes in the file.
  std::vector<BinTensor> tensors;
  uint64_t buffer_bytes = 0;  // OpBuffer bytes after the outputs (read past, not decoded)
};

// Most tensors and buffers one bin file may list (an op has a handful; a reader lists each).
inline constexpr uint64_t kMaxBinTensors = 65536;

// Parses a whole bin file. kInvalidArgument naming `name` when the length prefix is past the
// end, the header does not parse, lists more than kMaxBinTensors tensors and buffers, or
// 8 + header_len + sum(sizes) != file size.
Result<BinFile> parseBinFile(std::span<const std::byte> bytes, std::string_view name);

// "{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}" (no extension). The op name may not
// contain '.' (it is sanitised), so the split is exact; nullopt when the name is not one.
struct BinFileName {
  std::string op_type;
  std::string op_name;
  uint32_t task_id = 0;
  uint32_t stream_id = 0;
  uint64_t timestamp = 0;
};
std::optional<BinFileName> parseBinFileName(std::string_view file_name);

// Appends "{op_type}.{op_name}.{task}.{stream}.{ts}" with op_type and op_name sanitised as in
// npy names (appendSanitized).
void appendBinFileName(std::string& out, std::string_view op_type, std::string_view op_name,
                       uint32_t task_id, uint32_t stream_id, uint64_t timestamp);

}  // namespace dumpd::storage
