#include "daemon/dump_once_table.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <vector>

#include "ipc/op_codec.h"

namespace dumpd::daemon {
namespace {

uint64_t memoKey(uint64_t sequence, uint32_t tensor) {
  return sequence * ipc::kMaxTensorsPerRecord + tensor;
}

// The key `same` names; none when out of range (memoKey would wrap onto another tensor's).
std::optional<uint64_t> sameKey(const ipc::SamePayload& same) {
  if (same.tensor >= ipc::kMaxTensorsPerRecord ||
      same.sequence >= UINT64_MAX / ipc::kMaxTensorsPerRecord) {
    return std::nullopt;
  }
  return memoKey(same.sequence, same.tensor);
}

}  // namespace

std::shared_ptr<storage::TensorMemo> DumpOnceTable::remember(uint64_t sequence, uint32_t index,
                                                             const Tensor& t, bool kept) {
  if (memos_.size() >= ipc::kMaxMemoTensorsPerStep) return nullptr;
  auto memo = std::make_shared<storage::TensorMemo>(
      t.graph_id, t.iteration, t.dtype, std::vector<int64_t>(t.shape.begin(), t.shape.end()));
  memos_.emplace(memoKey(sequence, index), memo);
  if (kept) kept_.insert(memo.get());
  return memo;
}

DumpOnceTable::Repeat DumpOnceTable::find(const ipc::SamePayload& same, const Tensor& t,
                                          bool kept) const {
  const std::optional<uint64_t> key = sameKey(same);
  auto it = key ? memos_.find(*key) : memos_.end();
  if (it == memos_.end()) {
    return {nullptr,
            " repeats a tensor this step did not dump (lost, or over the limit of remembered "
            "tensors)"};
  }
  const std::shared_ptr<storage::TensorMemo>& m = it->second;
  if (!kept && kept_.contains(m.get()) && !m->published()) {
    // Its source waits in the ring for a trigger: a writer would wait for it without end.
    return {nullptr, " repeats a tensor the flight recorder keeps unwritten"};
  }
  if (m->graphId() != t.graph_id || m->iteration() != t.iteration || m->dtype() != t.dtype ||
      !std::equal(t.shape.begin(), t.shape.end(), m->shape().begin(), m->shape().end())) {
    return {nullptr, " repeats a tensor of another step, dtype or shape"};
  }
  return {m, {}};
}

void DumpOnceTable::clear() {
  memos_.clear();
  kept_.clear();
}

}  // namespace dumpd::daemon
