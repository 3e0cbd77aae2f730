#include "client/op_plan.h"

#include <string>

#include "base/element_count.h"
#include "client/strided_copy.h"

namespace dumpd::client {
namespace {

Error slotError(const OpCall& op, const Tensor& t, const std::string& what) {
  return makeError(ErrorCode::kInvalidArgument, "tensor slot " + std::to_string(t.slot) + " of " +
                                                    std::string(op.op_name) + ": " + what);
}

}  // namespace

bool isStrided(const Tensor& t) {
  return !t.strides.empty() && t.strides.size() == t.shape.size() &&
         !isCContiguous(t.shape, t.strides, dtypeSize(t.dtype));
}

bool hasValueStatistics(DType dtype) {
  return dtype != DType::kComplex64 && dtype != DType::kComplex128;
}

Status planOp(const OpCall& op, const OpPlanSettings& settings, OpPlan& out) {
  out.clear();
  for (const Tensor& t : op.tensors) {
    if (!(t.io == Io::kInput ? settings.want_inputs : settings.want_outputs)) {
      ++out.filtered;
      continue;
    }
    const auto elements = elementCount(t.shape);
    if (!elements) {
      return slotError(op, t, "a dimension is negative or the shape has more than 2^56 elements");
    }
    const uint64_t want = sourceBytes(t.dtype, *elements);
    if (t.bytes != want) {
      return slotError(op, t,
                       std::to_string(t.bytes) + " bytes given, shape and " +
                           std::string(dtypeName(t.dtype)) + " need " + std::to_string(want));
    }
    if (!t.strides.empty() && t.strides.size() != t.shape.size()) {
      return slotError(op, t,
                       std::to_string(t.strides.size()) + " strides given for " +
                           std::to_string(t.shape.size()) + " dimensions");
    }
    if (isStrided(t) && (t.memory != Memory::kHost || dtypeSize(t.dtype) == 0)) {
      return slotError(op, t,
                       "strides are for host tensors of whole-byte elements; make this " +
                           std::string(dtypeName(t.dtype)) + " tensor contiguous first");
    }
    ipc::TensorSpec s;
    s.io = static_cast<uint8_t>(t.io);
    s.dtype = static_cast<uint8_t>(t.dtype);
    s.slot = t.slot;
    s.shape = t.shape;
    s.format = t.format;
    s.timestamp_us = settings.timestamp_us;
    s.data_bytes = t.bytes;
    if (t.statistics != nullptr) {
      if (!settings.given_statistics) {
        return slotError(op, t,
                         "statistics were given in place of the tensor, but this job writes "
                         "more than statistics (saved_data, md5/sha1 or the flight recorder's "
                         "mode), or the call reserves ring space (reserveOp)");
      }
      if (!hasValueStatistics(t.dtype)) {
        return slotError(op, t, std::string(dtypeName(t.dtype)) + " has no statistics");
      }
      if (t.statistics->count != *elements) {
        return slotError(op, t,
                         "the statistics count " + std::to_string(t.statistics->count) +
                             " elements, the shape holds " + std::to_string(*elements));
      }
      if (t.statistics->flags != 0) {
        return slotError(op, t, "statistics flags must be 0 (plain sums)");
      }
      s.payload = ipc::PayloadKind::kStatistics;
      s.data_bytes = sizeof(ipc::StatsPayload);
    } else if (settings.device_statistics && t.memory == Memory::kCuda && t.bytes != 0 &&
               hasValueStatistics(t.dtype)) {
      // Only the statistics cross to the host: computed on the device by the pipeline.
      s.payload = ipc::PayloadKind::kStatistics;
      s.data_bytes = sizeof(ipc::StatsPayload);
    } else if (settings.host_statistics && t.memory == Memory::kHost && t.bytes != 0 &&
               hasValueStatistics(t.dtype) &&
               (!isStrided(t) || t.bytes <= kStridedStatisticsBytes)) {
      // 96 bytes cross instead of the tensor: the client computes them (dumpOp).
      s.payload = ipc::PayloadKind::kStatistics;
      s.data_bytes = sizeof(ipc::StatsPayload);
    } else if (settings.defer && t.memory == Memory::kCuda && t.bytes != 0) {
      // Kept on the device by the flight recorder: its statistics now, its bytes on a fetch.
      // A dump-once source like any other (a repeat becomes a reference and takes no
      // snapshot); should its bytes never arrive, the daemon fails its repeats with it.
      s.payload = ipc::PayloadKind::kDeferred;
      s.data_bytes = ipc::kDeferredHeaderBytes + t.bytes;
    }
    out.specs.push_back(s);
    out.selected.push_back(&t);
  }
  return {};
}

}  // namespace dumpd::client
