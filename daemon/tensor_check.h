// The drain's check of one tensor of an op record before anything uses it: a dtype it knows,
// a payload that matches its shape and dtype, and a payload kind the job accepts (repeats,
// device statistics, tensors kept on the client's device). Payloads are copied once out of
// shared memory and that copy is what is checked and used: the client may change the ring
// meanwhile. A failed check ends the session of the client that wrote the record.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "base/result.h"
#include "ipc/op_codec.h"
#include "ipc/ring_format.h"

namespace dumpd::daemon {

// What the job accepts of a record, decided once per record.
struct TensorRules {
  bool overflow_dump = false;         // every tensor's bytes are needed (no repeats)
  bool statistics_from_sums = false;  // device statistics can stand for the bytes
  bool has_recorder = false;
  bool iteration_dumped = false;  // selected: written as the job says, never kept on a device
};

// A tensor that passed the check, with the payload copies its kind needs.
struct CheckedTensor {
  DType dtype = DType::kFloat32;
  uint64_t elements = 0;
  ipc::StatsPayload stats{};  // PayloadKind::kStatistics and kDeferred
  ipc::SamePayload same{};    // PayloadKind::kSame
};

// Tensor `t` of `op`, the op record `sequence`, checked against `rules`; the error names the
// record, the op and what is wrong.
Result<CheckedTensor> checkTensor(uint64_t sequence, const ipc::DecodedOp& op,
                                  const ipc::DecodedTensor& t, const TensorRules& rules);

}  // namespace dumpd::daemon
