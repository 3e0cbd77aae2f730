// Dump once, storage side: what the writer did with a tensor that later tensors of the same
// step repeat (same bytes, dtype and shape), so that they are written from it: a hard link of
// its file and a copy of its statistics row, without its bytes.
//
// The daemon's drain creates one TensorMemo per tensor the client flagged (ipc::kMemoBit), in
// record order; the writer publishes into it once it has written (or failed, or skipped) that
// tensor; writing a repeat waits for it. Waiting cannot deadlock: the writer pool runs one
// session's tasks in submission order, so the tensor waited for belongs to a task already
// running on another thread (or finished), or to an earlier tensor of the same op, which
// JobWriter::writeOp settles before it moves on.
//
// Thread-safety: publish() and wait() may be called from any threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "storage/statistics.h"

namespace dumpd::storage {

struct MemoResult {
  // False: the tensor failed or was never written (filtered, overflow mode): `error` says why.
  bool ok = false;
  std::string error;
  // The payload file, when one was written: root-relative directory and name in it.
  std::string dir;
  std::string file;
  bool payload_dropped = false;  // the payload was dropped (quota, free space)
  std::optional<TensorStats> stats;
};

class TensorMemo {
 public:
  // What the repeat must match, known when the drain creates the memo.
  TensorMemo(uint32_t graph_id, uint32_t iteration, DType dtype, std::vector<int64_t> shape)
      : graph_id_(graph_id), iteration_(iteration), dtype_(dtype), shape_(std::move(shape)) {}

  // The first call wins; later ones do nothing.
  void publish(MemoResult result);
  // Blocks until published.
  const MemoResult& wait() const;
  bool published() const;

  uint32_t graphId() const { return graph_id_; }
  uint32_t iteration() const { return iteration_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }

 private:
  const uint32_t graph_id_;
  const uint32_t iteration_;
  const DType dtype_;
  const std::vector<int64_t> shape_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_; result_ is immutable once set
  MemoResult result_;
};

}  // namespace dumpd::storage
