// Encoding of one op execution into a ring record body (producer) and its validation and
// decoding (consumer). See ipc/ring_format.h for the layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "ipc/ring_format.h"

namespace dumpd::ipc {

inline constexpr uint32_t kMaxDims = 32;
inline constexpr uint32_t kMaxNameBytes = 4096;
inline constexpr uint32_t kMaxFormatBytes = 64;
inline constexpr uint32_t kMaxTensorsPerRecord = 4096;

struct TensorSpec {
  uint8_t io = 1;      // 0 input, 1 output
  uint8_t dtype = 10;  // DType wire value
  uint32_t slot = 0;
  std::span<const int64_t> shape;
  std::string_view format = "DefaultFormat";
  uint64_t timestamp_us = 0;
  uint64_t data_bytes = 0;  // sizeof(StatsPayload) / sizeof(SamePayload) for those kinds
  PayloadKind payload = PayloadKind::kBytes;
  bool memo = false;  // kMemoBit: later tensors of the step may refer to this one
};

struct OpSpec {
  uint32_t graph_id = 0;
  uint32_t iteration = 0;
  uint32_t task_id = 0;
  uint32_t stream_id = 0;
  uint32_t flags = 0;
  std::string_view op_type;
  std::string_view op_name;
  std::span<const TensorSpec> tensors;
};

// Checks the limits above; an error names the offending field.
Status checkOpSpec(const OpSpec& op);
// Body bytes of the record for `op` (descriptors + aligned payloads).
uint64_t opBodyBytes(const OpSpec& op);
// Writes the descriptors into `body` (opBodyBytes(op) bytes) and stores where each tensor's
// payload goes in payloads[i] (the caller copies or produces the bytes there).
// descriptors[i], when given, gets the address of tensor i's TensorDesc::io byte (the
// producer sets kCheckedBit / kNonFiniteBit there after its copy, before the commit).
void writeOpDescriptors(std::byte* body, const OpSpec& op, std::span<std::byte*> payloads,
                        std::span<std::byte*> descriptors = {});

// Consumer side: a decoded record. Names, dims and formats are copied out of shared memory
// (the producer may still write there); payload pointers stay in the ring.
struct DecodedTensor {
  uint8_t io;  // 0 input, 1 output
  uint8_t dtype;
  PayloadKind payload;  // kStatistics / kSame: data holds a StatsPayload / SamePayload
  // One byte together, so that a kept record's descriptors cost what they did (the flight
  // recorder's memory bound counts them).
  bool memo : 1;        // kMemoBit
  bool checked : 1;     // kCheckedBit: non_finite is the producer's scan of the bytes
  bool non_finite : 1;  // kNonFiniteBit
  uint32_t slot;
  uint64_t timestamp_us;
  uint32_t dims_begin;  // index into DecodedOp::dims
  uint32_t ndim;
  uint32_t format_begin;  // offset into DecodedOp::strings
  uint32_t format_len;
  const std::byte* data;
  uint64_t data_bytes;
};

static_assert(sizeof(DecodedTensor) == 48, "kept records are accounted by this size");

struct DecodedOp {
  uint32_t graph_id = 0;
  uint32_t iteration = 0;
  uint32_t task_id = 0;
  uint32_t stream_id = 0;
  uint32_t flags = 0;
  std::string strings;  // op_type, op_name, then formats
  uint32_t op_type_len = 0;
  uint32_t op_name_len = 0;
  std::vector<int64_t> dims;
  std::vector<DecodedTensor> tensors;

  std::string_view opType() const { return std::string_view(strings).substr(0, op_type_len); }
  std::string_view opName() const {
    return std::string_view(strings).substr(op_type_len, op_name_len);
  }
  std::span<const int64_t> shape(const DecodedTensor& t) const {
    return std::span<const int64_t>(dims).subspan(t.dims_begin, t.ndim);
  }
  std::string_view format(const DecodedTensor& t) const {
    return std::string_view(strings).substr(t.format_begin, t.format_len);
  }
};

// Validates and decodes a kOp body; reuses `out`'s buffers. Any inconsistency (lengths,
// offsets, limits) is an error describing it; nothing is read outside [body, body+bytes).
Status decodeOp(const std::byte* body, uint64_t body_bytes, DecodedOp& out);

// What makes a StatsPayload of a tensor of `elements` elements corrupt (empty: nothing): it
// counts exactly the tensor's elements, no category more than that, and its reserved field is
// zero. Check a copy taken out of the ring, and use that copy: the client may change the ring.
std::string statsPayloadProblem(const StatsPayload& p, uint64_t elements);

}  // namespace dumpd::ipc
