// One op execution as an Ascend bin file (storage/format/bin_file.h): the tensors that go in, their
// bytes in file order (every input, then every output, each by slot) and the header. The bytes are
// not copied: buffers() points into the tensors' own memory (the daemon's ring), so the file is one
// writev of the header and the tensors.
//
// Thread-safety: none; one per writer thread (JobWriter keeps a thread_local one).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "storage/format/bin_file.h"
#include "storage/fs/file_system.h"
#include "storage/writer/op_record.h"

namespace dumpd::storage {

class BinOpFile {
 public:
  // Starts a new file; keeps the capacity of the last one.
  void clear();
  // Adds tensor `t` with its first `elements` elements under `shape` (sampling shortens both;
  // REQUIRES: t.data holds sourceBytes(t.dtype, elements) bytes or more). `format` is the
  // producer's format string (DefaultFormat under trans_flag).
  void add(const TensorView& t, std::span<const int64_t> shape, uint64_t elements,
           std::string_view format);
  size_t tensorCount() const { return used_; }
  // Serialises the header (version 2.0, `dump_time_us`, the full op name) and orders the
  // buffers. REQUIRES: called after the last add().
  void build(std::string_view op_name, uint64_t dump_time_us);
  // Header first, then the tensors' bytes in file order. Valid until clear()/add().
  std::span<const ConstBuffer> buffers() const { return buffers_; }
  uint64_t fileSize() const { return file_size_; }

 private:
  struct Entry {
    Io io = Io::kOutput;
    uint32_t slot = 0;
    DType dtype = DType::kFloat32;
    std::vector<int64_t> shape;
    std::string format;
    ConstBuffer bytes;
  };
  std::vector<Entry> entries_;
  size_t used_ = 0;  // entries_[0, used_) belong to the current file
  std::vector<const Entry*> order_;
  std::vector<BinTensorSpec> specs_;
  std::string header_;
  std::vector<ConstBuffer> buffers_;
  uint64_t file_size_ = 0;
};

}  // namespace dumpd::storage
