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
// The file repeats are made from: a hard link of the first tensor's file, at most
// `max_links` of them per file and step (JobOptions::max_links_per_file). Past that, or where
// the file system refuses the link (EMLINK, EPERM, EXDEV, no links), the writer writes a new
// first file, a copy that passes the payload gate (quota, free space) like any payload, and
// makes it the source of later links (rebase). So one 16-byte reference never buys more than
// a link, and every max_links references cost one payload the job is charged for.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/mutex.h"
#include "storage/format/statistics.h"

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
  uint64_t file_bytes = 0;  // the payload file's size: what a copy of it costs
};

// What a repeat links to (TensorMemo::claimLink).
struct LinkSource {
  std::string file;    // in the published directory (MemoResult::dir)
  uint64_t bytes = 0;  // its size
  // true: a link to `file` is claimed. false: the caller writes the new first file (a copy of
  // `file`) and must end with rebase() or abandonRebase(); other claims wait until then.
  bool claimed = false;
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

  // REQUIRES: published (wait() returned) with a file. Claims one of the `max_links` link
  // slots of the current link source (the published file until rebase()); when they are used
  // up, the caller is the one that writes the new first file. Waits while another does.
  LinkSource claimLink(uint32_t max_links);
  // The file system refused the link to `file` (EMLINK, EPERM, ...): the caller writes the new
  // first file, unless another caller has replaced `file` meanwhile (then: a claim on that).
  LinkSource linkRefused(const std::string& file, uint32_t max_links);
  // The caller that writes the new first file wrote `file` (`bytes`): later repeats link to it.
  void rebase(std::string file, uint64_t bytes);
  // ... or did not (dropped, failed): the next claim past the limit tries again.
  void abandonRebase();

  uint32_t graphId() const { return graph_id_; }
  uint32_t iteration() const { return iteration_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }

 private:
  const uint32_t graph_id_;
  const uint32_t iteration_;
  const DType dtype_;
  const std::vector<int64_t> shape_;
  mutable Mutex mu_;
  mutable CondVar cv_;
  bool done_ GUARDED_BY(mu_) = false;
  MemoResult result_ GUARDED_BY(mu_);  // immutable once done_
  // The link source: empty until the first claimLink() takes result_'s.
  std::string link_file_ GUARDED_BY(mu_);
  uint64_t link_bytes_ GUARDED_BY(mu_) = 0;
  uint32_t links_ GUARDED_BY(mu_) = 0;     // links claimed to link_file_
  bool rebasing_ GUARDED_BY(mu_) = false;  // a caller is writing the new first file
};

}  // namespace dumpd::storage
