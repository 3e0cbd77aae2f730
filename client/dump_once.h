// Dump each tensor once: the tensors of the current step that later tensors may repeat, and
// where each went in the ring.
//
// A caller that knows two tensors of one step hold the same bytes gives both the same nonzero
// Tensor::identity (the Python binding derives it from the torch tensor object and its version
// counter). The second one then crosses the ring as a 16-byte ipc::SamePayload naming the
// first, instead of its bytes: no copy, no device snapshot, no statistics kernel, and the
// daemon writes its file as a hard link of the first one's. See docs/architecture.md.
//
// Thread-safety: none; owned by the Client (one producer thread).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "client/client.h"

namespace dumpd::client {

class DumpOnceTable {
 public:
  struct Ref {
    uint64_t sequence = 0;  // ring record
    uint32_t tensor = 0;    // index of the tensor in that record
  };

  // The remembered tensor that `t` repeats: same identity, and (a check on the caller) same
  // data pointer, byte size, dtype, shape, layout, memory and device. nullopt otherwise.
  std::optional<Ref> find(const Tensor& t) const;
  // Remembers `t` (identity != 0) as tensor `where`, which was sent with ipc::kMemoBit.
  // REQUIRES: canRemember(0).
  void remember(const Tensor& t, Ref where);
  // False once ipc::kMaxMemoTensorsPerStep tensors (`pending` of them not remembered yet)
  // were flagged this step: the daemon keeps no more, so no more may carry kMemoBit.
  bool canRemember(size_t pending) const;
  // True when `a` and `b` may share one file: same identity, pointer, size, dtype, shape,
  // layout (strides, C-contiguous however given), memory and device.
  static bool sameTensor(const Tensor& a, const Tensor& b);
  // A new step: nothing of the last one may be named again.
  void clear() {
    entries_.clear();
    remembered_ = 0;
  }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    Ref ref;
    Tensor tensor;  // what was sent; its shape and strides point into these
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
  };
  std::unordered_map<uint64_t, Entry> entries_;
  uint32_t remembered_ = 0;  // this step, replaced entries included
};

}  // namespace dumpd::client
