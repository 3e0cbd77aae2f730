#include "ipc/op_codec.h"

#include <cstddef>
#include <cstring>
#include <string>

namespace dumpd::ipc {
namespace {

// Payloads are aligned so that the record offset (body offset + header) is 64-aligned.
uint64_t payloadOffset(uint64_t body_off) {
  return alignUp(body_off + sizeof(RecordHeader), kRecordAlign) - sizeof(RecordHeader);
}

uint64_t descriptorBytes(const OpSpec& op) {
  uint64_t n = sizeof(OpHeader) + alignUp(op.op_type.size() + op.op_name.size(), 8);
  for (const TensorSpec& t : op.tensors) {
    n += sizeof(TensorDesc) + alignUp(t.shape.size() * sizeof(int64_t) + t.format.size(), 8);
  }
  return n;
}

Error bad(const std::string& why) {
  return makeError(ErrorCode::kProtocol, "malformed op record: " + why);
}

}  // namespace

Status checkOpSpec(const OpSpec& op) {
  if (op.op_type.size() > kMaxNameBytes || op.op_name.size() > kMaxNameBytes) {
    return makeError(ErrorCode::kInvalidArgument,
                     "op name or type longer than " + std::to_string(kMaxNameBytes) + " bytes");
  }
  if (op.tensors.empty() || op.tensors.size() > kMaxTensorsPerRecord) {
    return makeError(ErrorCode::kInvalidArgument,
                     "an op record holds 1.." + std::to_string(kMaxTensorsPerRecord) +
                         " tensors, got " + std::to_string(op.tensors.size()));
  }
  for (const TensorSpec& t : op.tensors) {
    if (t.shape.size() > kMaxDims) {
      return makeError(ErrorCode::kInvalidArgument, "tensor has " + std::to_string(t.shape.size()) +
                                                        " dimensions; the limit is " +
                                                        std::to_string(kMaxDims));
    }
    if (t.format.size() > kMaxFormatBytes) {
      return makeError(ErrorCode::kInvalidArgument,
                       "format string longer than " + std::to_string(kMaxFormatBytes));
    }
    if (t.io > 1) return makeError(ErrorCode::kInvalidArgument, "io must be input or output");
    if (t.payload == PayloadKind::kStatistics && t.data_bytes != sizeof(StatsPayload)) {
      return makeError(
          ErrorCode::kInvalidArgument,
          "a statistics payload is " + std::to_string(sizeof(StatsPayload)) + " bytes");
    }
    if (t.payload == PayloadKind::kSame && t.data_bytes != sizeof(SamePayload)) {
      return makeError(ErrorCode::kInvalidArgument,
                       "a same-as payload is " + std::to_string(sizeof(SamePayload)) + " bytes");
    }
    if (t.payload == PayloadKind::kDeferred && t.data_bytes < kDeferredHeaderBytes) {
      return makeError(ErrorCode::kInvalidArgument, "a deferred payload starts with a " +
                                                        std::to_string(kDeferredHeaderBytes) +
                                                        "-byte header");
    }
  }
  return {};
}

uint64_t opBodyBytes(const OpSpec& op) {
  uint64_t off = descriptorBytes(op);
  for (const TensorSpec& t : op.tensors) off = payloadOffset(off) + t.data_bytes;
  return off;
}

void writeOpDescriptors(std::byte* body, const OpSpec& op, std::span<std::byte*> payloads,
                        std::span<std::byte*> descriptors) {
  OpHeader h{};
  h.graph_id = op.graph_id;
  h.iteration = op.iteration;
  h.task_id = op.task_id;
  h.stream_id = op.stream_id;
  h.tensor_count = static_cast<uint32_t>(op.tensors.size());
  h.op_type_len = static_cast<uint16_t>(op.op_type.size());
  h.op_name_len = static_cast<uint16_t>(op.op_name.size());
  h.flags = op.flags;
  std::memcpy(body, &h, sizeof h);
  uint64_t off = sizeof h;
  std::memcpy(body + off, op.op_type.data(), op.op_type.size());
  std::memcpy(body + off + op.op_type.size(), op.op_name.data(), op.op_name.size());
  off += alignUp(op.op_type.size() + op.op_name.size(), 8);

  uint64_t data_off = descriptorBytes(op);
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    const TensorSpec& t = op.tensors[i];
    data_off = payloadOffset(data_off);
    TensorDesc d{};
    d.io = static_cast<uint8_t>(t.io | (t.memo ? kMemoBit : 0) |
                                (static_cast<uint8_t>(t.payload) << kPayloadKindShift));
    d.dtype = t.dtype;
    d.ndim = static_cast<uint8_t>(t.shape.size());
    d.format_len = static_cast<uint8_t>(t.format.size());
    d.slot = t.slot;
    d.timestamp_us = t.timestamp_us;
    d.data_offset = data_off;
    d.data_bytes = t.data_bytes;
    std::memcpy(body + off, &d, sizeof d);
    if (!descriptors.empty()) descriptors[i] = body + off + offsetof(TensorDesc, io);
    off += sizeof d;
    const size_t dims_bytes = t.shape.size() * sizeof(int64_t);
    if (dims_bytes != 0) std::memcpy(body + off, t.shape.data(), dims_bytes);
    std::memcpy(body + off + dims_bytes, t.format.data(), t.format.size());
    off += alignUp(dims_bytes + t.format.size(), 8);
    payloads[i] = body + data_off;
    data_off += t.data_bytes;
  }
}

Status decodeOp(const std::byte* body, uint64_t body_bytes, DecodedOp& out) {
  if (body_bytes < sizeof(OpHeader)) return bad("shorter than its header");
  OpHeader h;
  std::memcpy(&h, body, sizeof h);
  if (h.op_type_len > kMaxNameBytes || h.op_name_len > kMaxNameBytes) {
    return bad("name longer than " + std::to_string(kMaxNameBytes) + " bytes");
  }
  if (h.tensor_count == 0 || h.tensor_count > kMaxTensorsPerRecord) {
    return bad("tensor count " + std::to_string(h.tensor_count));
  }
  uint64_t off = sizeof h;
  const uint64_t names = uint64_t{h.op_type_len} + h.op_name_len;
  if (off + alignUp(names, 8) > body_bytes) return bad("names run past the record");
  out.graph_id = h.graph_id;
  out.iteration = h.iteration;
  out.task_id = h.task_id;
  out.stream_id = h.stream_id;
  out.flags = h.flags;
  out.op_type_len = h.op_type_len;
  out.op_name_len = h.op_name_len;
  out.strings.assign(reinterpret_cast<const char*>(body + off), names);
  off += alignUp(names, 8);
  out.dims.clear();
  out.tensors.clear();
  out.tensors.reserve(h.tensor_count);
  for (uint32_t i = 0; i < h.tensor_count; ++i) {
    if (off + sizeof(TensorDesc) > body_bytes) return bad("tensor descriptor past the record");
    TensorDesc d;
    std::memcpy(&d, body + off, sizeof d);
    off += sizeof d;
    if (d.ndim > kMaxDims) return bad("tensor with " + std::to_string(d.ndim) + " dims");
    const uint8_t kind = d.io >> kPayloadKindShift;
    const uint8_t scan = d.io & (kCheckedBit | kNonFiniteBit);
    if ((d.io & ~(kIoBit | kMemoBit | kCheckedBit | kNonFiniteBit) &
         ((1u << kPayloadKindShift) - 1)) != 0 ||
        kind > static_cast<uint8_t>(PayloadKind::kDeferred) ||
        (scan != 0 &&
         (kind != static_cast<uint8_t>(PayloadKind::kBytes) || (scan & kCheckedBit) == 0))) {
      return bad("io value " + std::to_string(d.io));
    }
    if (d.format_len > kMaxFormatBytes) return bad("format longer than 64 bytes");
    const uint64_t dims_bytes = uint64_t{d.ndim} * sizeof(int64_t);
    if (off + alignUp(dims_bytes + d.format_len, 8) > body_bytes) {
      return bad("tensor dims past the record");
    }
    DecodedTensor t{};
    t.io = d.io & kIoBit;
    t.payload = static_cast<PayloadKind>(kind);
    t.memo = (d.io & kMemoBit) != 0;
    t.checked = (d.io & kCheckedBit) != 0;
    t.non_finite = (d.io & kNonFiniteBit) != 0;
    t.dtype = d.dtype;
    t.slot = d.slot;
    t.timestamp_us = d.timestamp_us;
    t.dims_begin = static_cast<uint32_t>(out.dims.size());
    t.ndim = d.ndim;
    for (uint32_t k = 0; k < d.ndim; ++k) {
      int64_t v;
      std::memcpy(&v, body + off + k * sizeof(int64_t), sizeof v);
      if (v < 0) return bad("negative dimension " + std::to_string(v));
      out.dims.push_back(v);
    }
    t.format_begin = static_cast<uint32_t>(out.strings.size());
    t.format_len = d.format_len;
    out.strings.append(reinterpret_cast<const char*>(body + off + dims_bytes), d.format_len);
    off += alignUp(dims_bytes + d.format_len, 8);
    // Overflow-safe bounds check of the payload.
    if (d.data_offset > body_bytes || d.data_bytes > body_bytes - d.data_offset) {
      return bad("payload of tensor " + std::to_string(i) + " runs past the record");
    }
    if (t.payload == PayloadKind::kStatistics && d.data_bytes != sizeof(StatsPayload)) {
      return bad("statistics payload of tensor " + std::to_string(i) + " is " +
                 std::to_string(d.data_bytes) + " bytes");
    }
    if (t.payload == PayloadKind::kSame && d.data_bytes != sizeof(SamePayload)) {
      return bad("same-as payload of tensor " + std::to_string(i) + " is " +
                 std::to_string(d.data_bytes) + " bytes");
    }
    if (t.payload == PayloadKind::kDeferred && d.data_bytes < kDeferredHeaderBytes) {
      return bad("deferred payload of tensor " + std::to_string(i) + " is " +
                 std::to_string(d.data_bytes) + " bytes, shorter than its header");
    }
    t.data = body + d.data_offset;
    t.data_bytes = d.data_bytes;
    out.tensors.push_back(t);
  }
  return {};
}

std::string statsPayloadProblem(const StatsPayload& p, uint64_t elements) {
  if (p.count != elements) {
    return "counts " + std::to_string(p.count) + " elements of " + std::to_string(elements);
  }
  const std::pair<const char*, uint64_t> categories[] = {
      {"nan", p.nan},   {"negative_inf", p.negative_inf}, {"positive_inf", p.positive_inf},
      {"zero", p.zero}, {"negative", p.negative},         {"positive", p.positive}};
  for (const auto& [name, n] : categories) {
    if (n > elements) {
      return "counts " + std::to_string(n) + " " + name + " elements of " +
             std::to_string(elements);
    }
  }
  return (p.flags & ~kStatsAverage) != 0 ? "has unknown flags " + std::to_string(p.flags)
                                         : std::string();
}

}  // namespace dumpd::ipc
