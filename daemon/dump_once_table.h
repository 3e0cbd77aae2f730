// Dump once, on the daemon's side (docs/architecture.md, "Dump once"): the memos of the
// tensors a step's records flag (kMemoBit), by record and tensor index, and the lookup of
// the memo a later record's PayloadKind::kSame tensor repeats.
//
// Thread-safety: none; the session thread owns it. The memos themselves are shared with the
// writers (storage/writer/tensor_memo.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "base/dtype.h"
#include "ipc/ring_format.h"
#include "storage/writer/tensor_memo.h"

namespace dumpd::daemon {

class DumpOnceTable {
 public:
  // What a repeated tensor must match: the step and the dtype and shape of its source.
  struct Tensor {
    uint32_t graph_id = 0;
    uint32_t iteration = 0;
    DType dtype = DType::kFloat32;
    std::span<const int64_t> shape;
  };
  // The memo a repeat names, or why it cannot be used (the repeat is then not written).
  struct Repeat {
    std::shared_ptr<storage::TensorMemo> memo;
    std::string problem;  // " repeats ...": completes "a tensor of <op>"
  };

  // A new memo for tensor `index` of record `sequence`, or null when the step has
  // kMaxMemoTensorsPerStep already (its repeats then fail as unknown). `kept`: the flight
  // recorder keeps the record unwritten until a trigger.
  std::shared_ptr<storage::TensorMemo> remember(uint64_t sequence, uint32_t index, const Tensor& t,
                                                bool kept);
  // The memo `same` names, checked against the repeat `t`. `kept`: the repeat's own record
  // is kept by the flight recorder too (its source may then be kept unwritten).
  Repeat find(const ipc::SamePayload& same, const Tensor& t, bool kept) const;
  // A step mark: a new step repeats nothing of the last one.
  void clear();
  // A trigger fired: every kept record is being written, in order.
  void keptWritten() { kept_.clear(); }
  size_t size() const { return memos_.size(); }

 private:
  std::unordered_map<uint64_t, std::shared_ptr<storage::TensorMemo>> memos_;
  // Of those, the memos of records the flight recorder keeps (unwritten until a trigger).
  std::unordered_set<const storage::TensorMemo*> kept_;
};

}  // namespace dumpd::daemon
