#include "storage/writer/bin_op.h"

#include <algorithm>
#include <tuple>

namespace dumpd::storage {

void BinOpFile::clear() {
  used_ = 0;
  specs_.clear();
  buffers_.clear();
  header_.clear();
  file_size_ = 0;
}

void BinOpFile::add(const TensorView& t, std::span<const int64_t> shape, uint64_t elements,
                    std::string_view format) {
  if (used_ == entries_.size()) entries_.emplace_back();
  Entry& e = entries_[used_++];
  e.io = t.io;
  e.slot = t.slot;
  e.dtype = t.dtype;
  e.shape.assign(shape.begin(), shape.end());
  e.format.assign(format);
  e.bytes = t.data.first(sourceBytes(t.dtype, elements));
}

void BinOpFile::build(std::string_view op_name, uint64_t dump_time_us) {
  specs_.clear();
  buffers_.clear();
  buffers_.emplace_back();  // the header, set below
  uint64_t payload = 0;
  // Inputs then outputs, each by slot: a reader's index is then the slot. Equal slots keep the
  // order they were added in (entries_ is in that order); std::sort, unlike stable_sort, takes
  // no temporary buffer from the heap.
  order_.clear();
  for (size_t i = 0; i < used_; ++i) order_.push_back(&entries_[i]);
  std::sort(order_.begin(), order_.end(), [](const Entry* a, const Entry* b) {
    return std::tuple(a->io, a->slot, a) < std::tuple(b->io, b->slot, b);
  });
  {
    for (const Entry* entry : order_) {
      const Entry& e = *entry;
      specs_.push_back({e.io, e.dtype, e.shape, e.format, e.bytes.size()});
      if (!e.bytes.empty()) buffers_.push_back(e.bytes);
      payload += e.bytes.size();
    }
  }
  buildBinHeader(header_, op_name, dump_time_us, specs_);
  buffers_[0] = asBytes(header_);
  file_size_ = header_.size() + payload;
}

}  // namespace dumpd::storage
