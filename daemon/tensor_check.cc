#include "daemon/tensor_check.h"

#include <cstring>
#include <string>

#include "base/element_count.h"
#include "storage/format/statistics.h"

namespace dumpd::daemon {
namespace {

Error refused(uint64_t sequence, std::string what) {
  return makeError(ErrorCode::kProtocol, "record " + std::to_string(sequence) + what);
}

}  // namespace

Result<CheckedTensor> checkTensor(uint64_t sequence, const ipc::DecodedOp& op,
                                  const ipc::DecodedTensor& t, const TensorRules& rules) {
  if (!dtypeValid(t.dtype)) {
    return refused(sequence, " has unknown dtype " + std::to_string(t.dtype));
  }
  CheckedTensor c;
  c.dtype = static_cast<DType>(t.dtype);
  const auto elements = elementCount(op.shape(t));
  const std::string of = ": a tensor of " + std::string(op.opName());
  const bool sums = t.payload == ipc::PayloadKind::kStatistics;
  const bool repeat = t.payload == ipc::PayloadKind::kSame;
  const bool deferred = t.payload == ipc::PayloadKind::kDeferred;
  if (repeat && rules.overflow_dump) {
    return refused(sequence, of + " repeats an earlier one, but overflow mode needs every "
                                  "tensor's bytes");
  }
  if (sums && (!rules.statistics_from_sums || !storage::hasStatistics(c.dtype))) {
    return refused(sequence, of + " carries device statistics, but the job needs its bytes "
                                  "(saved_data, statistic_category or dtype)");
  }
  if (deferred) {
    // Only a recorded iteration's tensors may stay on the device: anything else would hold
    // the ring until a fetch that nothing asks for times out.
    if (!rules.has_recorder || rules.iteration_dumped) {
      return refused(sequence,
                     of + " is kept on the client's device, but " +
                         (rules.has_recorder ? "iteration " + std::to_string(op.iteration) +
                                                   " is dumped, not recorded"
                                             : std::string("the job has no flight "
                                                           "recorder")));
    }
    if (!storage::hasStatistics(c.dtype)) {
      return refused(sequence, of + " is kept on the device, but its dtype has no statistics");
    }
    if (reinterpret_cast<uintptr_t>(t.data) % alignof(ipc::DeferredPayload) != 0) {
      return refused(sequence, of + " is kept on the device at a misaligned payload offset");
    }
    if (!elements || t.data_bytes - ipc::kDeferredHeaderBytes != sourceBytes(c.dtype, *elements)) {
      return refused(sequence, of + " is kept on the device with " + std::to_string(t.data_bytes) +
                                   " payload bytes, which do not match its shape and dtype");
    }
  }
  if (!elements ||
      (!sums && !repeat && !deferred && sourceBytes(c.dtype, *elements) != t.data_bytes)) {
    return refused(sequence, of + " has " + std::to_string(t.data_bytes) +
                                 " bytes, which does not match its shape and dtype");
  }
  c.elements = *elements;
  if (sums || deferred) {
    std::memcpy(&c.stats, t.data, sizeof c.stats);
    if (std::string why = ipc::statsPayloadProblem(c.stats, c.elements); !why.empty()) {
      return refused(sequence, ": the device statistics of a tensor of " +
                                   std::string(op.opName()) + " are corrupt: the payload " + why);
    }
  }
  if (repeat) {
    std::memcpy(&c.same, t.data, sizeof c.same);
    if (c.same.reserved != 0) {
      return refused(sequence, ": a repeated tensor of " + std::string(op.opName()) +
                                   " is corrupt: its payload has a non-zero reserved field");
    }
  }
  return c;
}

}  // namespace dumpd::daemon
