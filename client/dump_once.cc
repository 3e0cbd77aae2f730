#include "client/dump_once.h"

#include <algorithm>

#include "client/strided_copy.h"
#include "ipc/ring_format.h"

namespace dumpd::client {

std::optional<DumpOnceTable::Ref> DumpOnceTable::find(const Tensor& t) const {
  if (t.identity == 0) return std::nullopt;
  auto it = entries_.find(t.identity);
  if (it == entries_.end() || !sameTensor(it->second.tensor, t)) return std::nullopt;
  return it->second.ref;
}

bool DumpOnceTable::canRemember(size_t pending) const {
  return remembered_ + pending < ipc::kMaxMemoTensorsPerStep;
}

namespace {

// The strides that say where `t`'s bytes are: empty for a C-contiguous tensor, however given.
std::span<const int64_t> layoutOf(const Tensor& t) {
  if (t.strides.empty() || isCContiguous(t.shape, t.strides, dtypeSize(t.dtype))) return {};
  return t.strides;
}

}  // namespace

bool DumpOnceTable::sameTensor(const Tensor& a, const Tensor& b) {
  const std::span<const int64_t> la = layoutOf(a);
  const std::span<const int64_t> lb = layoutOf(b);
  return a.identity == b.identity && a.data == b.data && a.bytes == b.bytes && a.dtype == b.dtype &&
         a.memory == b.memory && (a.memory != Memory::kCuda || a.device == b.device) &&
         std::equal(a.shape.begin(), a.shape.end(), b.shape.begin(), b.shape.end()) &&
         std::equal(la.begin(), la.end(), lb.begin(), lb.end());
}

void DumpOnceTable::remember(const Tensor& t, Ref where) {
  if (t.identity == 0 || !canRemember(0)) return;
  ++remembered_;
  Entry& e = entries_[t.identity];  // map nodes never move: e.tensor.shape stays valid
  e.ref = where;
  e.shape.assign(t.shape.begin(), t.shape.end());
  e.strides.assign(t.strides.begin(), t.strides.end());
  e.tensor = t;
  e.tensor.shape = e.shape;
  e.tensor.strides = e.strides;
  e.tensor.format = {};  // compared by nothing; not kept pointing into the caller
}

}  // namespace dumpd::client
