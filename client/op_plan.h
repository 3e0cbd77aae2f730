// What one op's record holds, decided before anything is reserved in the ring: which of the
// op's tensors go (the job's input_output selection), each one's descriptor (shape, bytes,
// whether its bytes, its device-computed statistics or a deferred snapshot cross), and the
// checks that turn a malformed call into an error naming the slot. Client::reserve plans,
// marks dump-once repeats, then writes the plan; Client::dumpOp copies.
//
// Values in, a plan out: a unit test questions it without a ring or a daemon
// (tests/client/op_plan_test.cc).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.h"
#include "client/client.h"
#include "ipc/op_codec.h"

namespace dumpd::client {

struct OpPlanSettings {
  bool want_inputs = true;         // the job's input_output selects inputs
  bool want_outputs = true;        // ... and outputs
  bool device_statistics = false;  // CUDA tensors' statistics are computed on the device
  bool defer = false;              // this op's CUDA tensors stay on the device (recorder)
  // Host tensors send their statistics, computed by the client (only statistics of this step
  // are written, and the caller does not write the payloads itself); strided ones up to
  // kStridedStatisticsBytes.
  bool host_statistics = false;
  // Tensors may carry their statistics (Tensor::statistics): the job writes only statistics
  // and the call is a dumpOp. Else such a tensor is refused.
  bool given_statistics = false;
  uint64_t timestamp_us = 0;  // every tensor's timestamp
};

struct OpPlan {
  std::vector<ipc::TensorSpec> specs;   // one per tensor that goes, in call order
  std::vector<const Tensor*> selected;  // the tensor of each spec
  uint64_t filtered = 0;                // tensors input_output left out

  void clear() {
    specs.clear();
    selected.clear();
    filtered = 0;
  }
};

// A host tensor whose strides are not the C-ordered ones: copied with copyStrided.
bool isStrided(const Tensor& t);
// The largest strided host tensor whose statistics the client computes (host_statistics): it
// is first copied in C order into a buffer the client keeps; a larger one crosses whole.
inline constexpr uint64_t kStridedStatisticsBytes = 64ull << 20;
// complex64/complex128 have no statistics row: their bytes go to the daemon as they are.
bool hasValueStatistics(DType dtype);

// Fills `out` (cleared first) for `op`. kInvalidArgument naming the op and the slot for a
// negative dimension or more than 2^56 elements, bytes that do not match shape and dtype,
// strides that do not match the shape, or strides on a tensor that cannot take them. On an
// error `out.filtered` still counts the tensors left out before it.
Status planOp(const OpCall& op, const OpPlanSettings& settings, OpPlan& out);

}  // namespace dumpd::client
