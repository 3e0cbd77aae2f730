#include "storage/format/bin_file.h"

#include <array>
#include <bit>
#include <cstring>
#include <limits>

#include <google/protobuf/arena.h>

#include "proto/ascend_dump.pb.h"
#include "storage/format/names.h"

namespace dumpd::storage {
namespace {

namespace pb = toolkit::dumpdata;

// Arena room for the header of an op with about a hundred tensors.
constexpr size_t kArenaBlockBytes = 64 << 10;

// OutputDataType by dumpd wire value (base/dtype.h order).
constexpr std::array<int, kDTypeCount> kBinTypes = {
    pb::DT_BOOL,   pb::DT_INT8,   pb::DT_INT16,  pb::DT_INT32,     pb::DT_INT64,      pb::DT_UINT8,
    pb::DT_UINT16, pb::DT_UINT32, pb::DT_UINT64, pb::DT_FLOAT16,   pb::DT_FLOAT,      pb::DT_DOUBLE,
    pb::DT_BF16,   pb::DT_INT4,   pb::DT_UINT1,  pb::DT_COMPLEX64, pb::DT_COMPLEX128,
};

// The spec's OutputDataType names, by value (0..31).
constexpr std::array<std::string_view, 32> kBinTypeNames = {
    "DT_UNDEFINED",      "DT_FLOAT",     "DT_FLOAT16",    "DT_INT8",     "DT_UINT8",
    "DT_INT16",          "DT_UINT16",    "DT_INT32",      "DT_INT64",    "DT_UINT32",
    "DT_UINT64",         "DT_BOOL",      "DT_DOUBLE",     "DT_STRING",   "DT_DUAL_SUB_INT8",
    "DT_DUAL_SUB_UINT8", "DT_COMPLEX64", "DT_COMPLEX128", "DT_QINT8",    "DT_QINT16",
    "DT_QINT32",         "DT_QUINT8",    "DT_QUINT16",    "DT_RESOURCE", "DT_STRING_REF",
    "DT_DUAL",           "DT_VARIANT",   "DT_BF16",       "DT_INT4",     "DT_UINT1",
    "DT_INT2",           "DT_UINT2",
};

// The spec's OutputFormat names without "FORMAT_", by value (0..40); 255 is MAX.
constexpr std::array<std::string_view, 41> kFormatNames = {
    "NCHW",
    "NHWC",
    "ND",
    "NC1HWC0",
    "FRACTAL_Z",
    "NC1C0HWPAD",
    "NHWC1C0",
    "FSR_NCHW",
    "FRACTAL_DECONV",
    "C1HWNC0",
    "FRACTAL_DECONV_TRANSPOSE",
    "FRACTAL_DECONV_SP_STRIDE_TRANS",
    "NC1HWC0_C04",
    "FRACTAL_Z_C04",
    "CHWN",
    "FRACTAL_DECONV_SP_STRIDE8_TRANS",
    "HWCN",
    "NC1KHKWHWC0",
    "BN_WEIGHT",
    "FILTER_HWCK",
    "HASHTABLE_LOOKUP_LOOKUPS",
    "HASHTABLE_LOOKUP_KEYS",
    "HASHTABLE_LOOKUP_VALUE",
    "HASHTABLE_LOOKUP_OUTPUT",
    "HASHTABLE_LOOKUP_HITS",
    "C1HWNCoC0",
    "MD",
    "NDHWC",
    "FRACTAL_ZZ",
    "FRACTAL_NZ",
    "NCDHW",
    "DHWCN",
    "NDC1HWC0",
    "FRACTAL_Z_3D",
    "CN",
    "NC",
    "DHWNC",
    "FRACTAL_Z_3D_TRANSPOSE",
    "FRACTAL_ZN_LSTM",
    "FRACTAL_Z_G",
    "RESERVED",
};

template <typename Tensor>
void fillTensor(Tensor& t, const BinTensorSpec& spec) {
  t.set_data_type(static_cast<pb::OutputDataType>(binDataType(spec.dtype)));
  t.set_format(static_cast<pb::OutputFormat>(binFormat(spec.format)));
  auto* shape = t.mutable_shape();
  for (int64_t d : spec.shape) shape->add_dim(static_cast<uint64_t>(d));
  // Ascend writes the original shape beside the device shape; dumpd has one logical shape.
  *t.mutable_original_shape() = *shape;
  t.set_size(spec.size);
}

template <typename Tensor>
Status readTensor(const Tensor& in, Io io, uint32_t index, uint64_t& offset, uint64_t end,
                  std::string_view name, BinFile& file) {
  BinTensor t;
  t.io = io;
  t.index = index;
  t.data_type = static_cast<int>(in.data_type());
  t.dtype = dtypeFromBinDataType(t.data_type);
  t.format = static_cast<int>(in.format());
  for (uint64_t d : in.shape().dim()) {
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return makeError(ErrorCode::kInvalidArgument,
                       std::string(name) + ": " + std::string(ioName(io)) + " " +
                           std::to_string(index) + " has a dimension of " + std::to_string(d));
    }
    t.shape.push_back(static_cast<int64_t>(d));
  }
  t.size = in.size();
  if (!in.data().empty()) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(name) + ": " + std::string(ioName(io)) + " " +
                         std::to_string(index) +
                         " carries its data inside the header (a version 1 file?); only "
                         "version 2.0 files, with the data after the header, are read");
  }
  if (t.size > end - offset) {
    return makeError(ErrorCode::kInvalidArgument,
                     std::string(name) + ": sizes do not add up: " + std::string(ioName(io)) + " " +
                         std::to_string(index) + " needs " + std::to_string(t.size) +
                         " bytes at offset " + std::to_string(offset) + ", the file has " +
                         std::to_string(end));
  }
  t.offset = offset;
  offset += t.size;
  file.tensors.push_back(std::move(t));
  return {};
}

bool parseUnsigned(std::string_view s, uint64_t max, uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (max - digit) / 10) return false;
    v = v * 10 + digit;
  }
  out = v;
  return true;
}

}  // namespace

int binDataType(DType t) {
  return dtypeValid(static_cast<uint8_t>(t)) ? kBinTypes[static_cast<size_t>(t)] : pb::DT_UNDEFINED;
}

std::optional<DType> dtypeFromBinDataType(int data_type) {
  for (size_t i = 0; i < kBinTypes.size(); ++i) {
    if (kBinTypes[i] == data_type) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::string binDataTypeName(int data_type) {
  if (data_type >= 0 && static_cast<size_t>(data_type) < kBinTypeNames.size()) {
    return std::string(kBinTypeNames[static_cast<size_t>(data_type)]);
  }
  return "DT_" + std::to_string(data_type);
}

int binFormat(std::string_view format) {
  for (size_t i = 0; i < kFormatNames.size(); ++i) {
    if (kFormatNames[i] == format) return static_cast<int>(i);
  }
  return pb::FORMAT_ND;
}

std::string binFormatName(int format) {
  if (format >= 0 && static_cast<size_t>(format) < kFormatNames.size()) {
    return std::string(kFormatNames[static_cast<size_t>(format)]);
  }
  if (format == pb::FORMAT_MAX) return "MAX";
  return "FORMAT_" + std::to_string(format);
}

void buildBinHeader(std::string& out, std::string_view op_name, uint64_t dump_time_us,
                    std::span<const BinTensorSpec> tensors) {
  // The message lives in an arena whose first block is this thread's: once warm, building a
  // header allocates nothing (tests/storage/hot_path_alloc_test.cc). A header larger than the
  // block takes more from the heap.
  alignas(16) thread_local std::byte block[kArenaBlockBytes];
  google::protobuf::ArenaOptions options;
  options.initial_block = reinterpret_cast<char*>(block);
  options.initial_block_size = sizeof block;
  google::protobuf::Arena arena(options);
  auto* data = google::protobuf::Arena::CreateMessage<pb::DumpData>(&arena);
  data->set_version(kBinVersion.data(), kBinVersion.size());
  data->set_dump_time(dump_time_us);
  for (const BinTensorSpec& spec : tensors) {
    if (spec.io == Io::kInput) {
      fillTensor(*data->add_input(), spec);
    } else {
      fillTensor(*data->add_output(), spec);
    }
  }
  // op_name (field 6, the last) is appended by hand after the other fields, which is where
  // protobuf serialises it: an arena string would still take its characters from the heap.
  const size_t fields_len = data->ByteSizeLong();
  uint8_t name_prefix[1 + 10];  // tag, varint length
  size_t prefix_len = 0;
  name_prefix[prefix_len++] = (6 << 3) | 2;  // field 6, length-delimited
  for (uint64_t v = op_name.size();; v >>= 7) {
    name_prefix[prefix_len++] = static_cast<uint8_t>((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    if (v <= 0x7F) break;
  }
  const size_t header_len =
      fields_len + (op_name.empty() ? 0 : prefix_len + op_name.size());  // proto3: "" is absent
  out.resize(kBinLengthBytes + header_len);
  uint64_t le = header_len;  // x86-64 and aarch64 are little-endian
  static_assert(std::endian::native == std::endian::little);
  char* p = out.data();
  std::memcpy(p, &le, kBinLengthBytes);
  p += kBinLengthBytes;
  data->SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(p));
  p += fields_len;
  if (!op_name.empty()) {
    std::memcpy(p, name_prefix, prefix_len);
    std::memcpy(p + prefix_len, op_name.data(), op_name.size());
  }
}

Result<BinFile> parseBinFile(std::span<const std::byte> bytes, std::string_view name) {
  auto bad = [&](const std::string& why) {
    return makeError(ErrorCode::kInvalidArgument, std::string(name) + ": " + why);
  };
  if (bytes.size() < kBinLengthBytes) {
    return bad("too short for a bin file (" + std::to_string(bytes.size()) +
               " bytes, the header length alone takes 8)");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), kBinLengthBytes);
  const uint64_t file_size = bytes.size();
  if (header_len > file_size - kBinLengthBytes) {
    return bad("header length " + std::to_string(header_len) + " is past the end of the file (" +
               std::to_string(file_size) + " bytes)");
  }
  if (header_len > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    return bad("header length " + std::to_string(header_len) + " is too large");
  }
  pb::DumpData data;
  if (!data.ParseFromArray(bytes.data() + kBinLengthBytes, static_cast<int>(header_len))) {
    return bad("the header does not parse as a DumpData message");
  }
  // A tensor costs its header two bytes: bound what a small file can make a reader list.
  if (static_cast<uint64_t>(data.input_size()) + static_cast<uint64_t>(data.output_size()) +
          static_cast<uint64_t>(data.buffer_size()) >
      kMaxBinTensors) {
    return bad("the header lists " + std::to_string(data.input_size()) + " inputs, " +
               std::to_string(data.output_size()) + " outputs and " +
               std::to_string(data.buffer_size()) + " buffers, more than " +
               std::to_string(kMaxBinTensors));
  }
  BinFile file;
  file.version = data.version();
  file.dump_time = data.dump_time();
  file.op_name = data.op_name();
  uint64_t offset = kBinLengthBytes + header_len;
  for (int i = 0; i < data.input_size(); ++i) {
    if (Status s = readTensor(data.input(i), Io::kInput, static_cast<uint32_t>(i), offset,
                              file_size, name, file);
        !s) {
      return s.error();
    }
  }
  for (int i = 0; i < data.output_size(); ++i) {
    if (Status s = readTensor(data.output(i), Io::kOutput, static_cast<uint32_t>(i), offset,
                              file_size, name, file);
        !s) {
      return s.error();
    }
  }
  for (const pb::OpBuffer& b : data.buffer()) {
    if (b.size() > file_size - offset) {
      return bad("sizes do not add up: a buffer needs " + std::to_string(b.size()) +
                 " bytes at offset " + std::to_string(offset) + ", the file has " +
                 std::to_string(file_size));
    }
    offset += b.size();
    file.buffer_bytes += b.size();
  }
  if (offset != file_size) {
    return bad("sizes do not add up: 8 + header " + std::to_string(header_len) +
               " + tensor and buffer bytes " +
               std::to_string(offset - kBinLengthBytes - header_len) + " = " +
               std::to_string(offset) + ", but the file has " + std::to_string(file_size) +
               " bytes");
  }
  return file;
}

std::optional<BinFileName> parseBinFileName(std::string_view file_name) {
  // Split at the last four dots: the op type may not contain one either (sanitised), so
  // exactly five fields.
  std::array<std::string_view, 5> fields;
  size_t field = 0;
  size_t start = 0;
  for (size_t i = 0; i <= file_name.size(); ++i) {
    if (i == file_name.size() || file_name[i] == '.') {
      if (field == fields.size()) return std::nullopt;
      fields[field++] = file_name.substr(start, i - start);
      start = i + 1;
    }
  }
  if (field != fields.size() || fields[0].empty() || fields[1].empty()) return std::nullopt;
  BinFileName n;
  uint64_t task = 0, stream = 0;
  if (!parseUnsigned(fields[2], std::numeric_limits<uint32_t>::max(), task) ||
      !parseUnsigned(fields[3], std::numeric_limits<uint32_t>::max(), stream) ||
      !parseUnsigned(fields[4], std::numeric_limits<uint64_t>::max(), n.timestamp)) {
    return std::nullopt;
  }
  n.op_type = std::string(fields[0]);
  n.op_name = std::string(fields[1]);
  n.task_id = static_cast<uint32_t>(task);
  n.stream_id = static_cast<uint32_t>(stream);
  return n;
}

void appendBinFileName(std::string& out, std::string_view op_type, std::string_view op_name,
                       uint32_t task_id, uint32_t stream_id, uint64_t timestamp) {
  appendOpStem(out, op_type, op_name, task_id, stream_id, timestamp);
}

}  // namespace dumpd::storage
