#include "client/dump_once.h"

#include <algorithm>

#include "ipc/ring_format.h"

namespace dumpd::client {

std::optional<DumpOnceTable::Ref> DumpOnceTable::find(const Tensor& t) const {
  if (t.identity == 0) return std::nullopt;
  auto it = entries_.find(t.identity);
  if (it == entries_.end()) return std::nullopt;
  const Entry& e = it->second;
  if (e.data != t.data || e.bytes != t.bytes || e.dtype != t.dtype || e.memory != t.memory ||
      (t.memory == Memory::kCuda && e.device != t.device) ||
      !std::equal(e.shape.begin(), e.shape.end(), t.shape.begin(), t.shape.end())) {
    return std::nullopt;
  }
  return e.ref;
}

bool DumpOnceTable::canRemember(size_t pending) const {
  return remembered_ + pending < ipc::kMaxMemoTensorsPerStep;
}

bool DumpOnceTable::sameTensor(const Tensor& a, const Tensor& b) {
  return a.identity == b.identity && a.data == b.data && a.bytes == b.bytes && a.dtype == b.dtype &&
         a.memory == b.memory && (a.memory != Memory::kCuda || a.device == b.device) &&
         std::equal(a.shape.begin(), a.shape.end(), b.shape.begin(), b.shape.end());
}

void DumpOnceTable::remember(const Tensor& t, Ref where) {
  if (t.identity == 0 || !canRemember(0)) return;
  ++remembered_;
  Entry& e = entries_[t.identity];
  e.ref = where;
  e.data = t.data;
  e.bytes = t.bytes;
  e.dtype = t.dtype;
  e.memory = t.memory;
  e.device = t.device;
  e.shape.assign(t.shape.begin(), t.shape.end());
}

}  // namespace dumpd::client
