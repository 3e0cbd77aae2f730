// The data plane of one dump session: reads the client's ring in order, decodes each record,
// re-checks the job's filter, hands tensors to the shared writer pool, writes control
// records (step marks, graphs, execution order, kernel args, constants) and completes steps.
//
// Thread-safety: handle(), completeStep() and finish() run on the session thread only.
// Writer-pool tasks hold a shared_ptr to the drain and touch only the writer (thread-safe),
// the counters (atomics), the warnings and the release queue. Status reads only atomics and
// snapshots (statusSnapshot()), never a lock the data plane holds.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/snapshot.h"
#include "config/dump_plan.h"
#include "config/filter.h"
#include "daemon/release_queue.h"
#include "daemon/session_warnings.h"
#include "ipc/op_codec.h"
#include "ipc/shm_ring.h"
#include "proto/dumpd.pb.h"
#include "storage/writer/job_writer.h"
#include "storage/writer/tensor_counters.h"
#include "storage/writer/tensor_memo.h"
#include "storage/writer/writer_pool.h"

namespace dumpd::daemon {

// The session's figures for status: the writer's tensor counters, summed from the outcomes
// of the writes this session handed over (tensors_dropped: not the client's own drops), and
// what only the session sees.
struct DrainCounters : storage::TensorCounters {
  std::atomic<uint64_t> records{0};
  std::atomic<uint64_t> tensors_received{0};
  std::atomic<uint64_t> tensors_failed{0};
  std::atomic<uint64_t> tensors_filtered{0};
};

// Figures the session thread refreshes for status (the io thread reads them as a Snapshot).
struct WriterSnapshot {
  std::string stop_reason;
  std::vector<std::string> unused_kernels;  // at most kMaxListedKernels
  uint32_t unused_kernels_total = 0;
};
inline constexpr size_t kMaxListedKernels = 64;

class RingDrain : public std::enable_shared_from_this<RingDrain> {
 public:
  RingDrain(uint64_t session_id, uint32_t device, config::DumpPlan plan, config::Filter filter,
            ipc::RingConsumer ring, std::shared_ptr<storage::FileSystem> fs,
            std::unique_ptr<storage::JobWriter> writer, storage::WriterPool& pool,
            std::function<void(uint64_t)> on_done);

  // Handles one record. False when the session must end: error() says why (a corrupt record
  // is the client's fault and ends only its own session).
  bool handle(const ipc::RingConsumer::Record& r);
  // Waits for every record in flight, completes the open iterations, logs the unused kernels.
  void finish();
  // Refreshes the figures status shows (free space, writer counters, unused kernels).
  void publishSnapshot();

  ipc::RingConsumer& ring() { return ring_; }
  const ipc::RingConsumer& ring() const { return ring_; }
  const std::string& error() const { return error_; }
  const DrainCounters& counters() const { return counters_; }
  SessionWarnings& warnings() { return warnings_; }
  const SessionWarnings& warnings() const { return warnings_; }
  uint64_t doneSequence() const { return release_.doneSequence(); }
  uint64_t settledSequence() const { return release_.settledSequence(); }
  uint32_t graphId() const { return graph_id_.load(std::memory_order_relaxed); }
  uint32_t iteration() const { return iteration_.load(std::memory_order_relaxed); }
  // The client's own drop count: untrusted, so saturated to 2^48 for totals.
  uint64_t clientDroppedTensors() const;
  uint64_t writeErrors() const { return write_errors_.load(std::memory_order_relaxed); }
  uint32_t openDirectories() const { return open_dirs_.load(std::memory_order_relaxed); }
  std::shared_ptr<const WriterSnapshot> snapshot() const { return snapshot_.load(); }
  const config::DumpPlan& plan() const { return plan_; }
  // Free bytes of the dump file system (fstatvfs: may be slow; never on the io thread).
  std::optional<uint64_t> writerFreeBytes();

 private:
  bool handleOp(const ipc::RingConsumer::Record& r);
  bool handleControl(const ipc::RingConsumer::Record& r);
  void completeStep();
  bool fail(std::string message);
  // Dump once: the memo a PayloadKind::kSame tensor names (key 0 when malformed), and the
  // checked memo of the tensor `t` repeats (null: counted as failed, with a warning).
  static uint64_t sameKey(const ipc::SamePayload& same);
  // `same`: t's payload, as copied out of the ring once.
  std::shared_ptr<storage::TensorMemo> repeatedTensor(uint64_t sequence, const ipc::DecodedOp& op,
                                                      const ipc::DecodedTensor& t,
                                                      const ipc::SamePayload& same);
  // Dropped tensors reported by the client since the last manifest line (never negative).
  uint64_t takeClientDropped();

  const uint64_t id_;
  const uint32_t device_;
  const config::DumpPlan plan_;
  config::Filter filter_;  // session thread only (its name cache mutates)
  ipc::RingConsumer ring_;
  std::shared_ptr<storage::FileSystem> fs_;
  std::unique_ptr<storage::JobWriter> writer_;
  storage::WriterPool& pool_;
  ReleaseQueue release_;
  SessionWarnings warnings_;
  DrainCounters counters_;
  std::string error_;
  std::atomic<uint32_t> graph_id_{0};
  std::atomic<uint32_t> iteration_{0};
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint32_t> open_dirs_{0};
  Snapshot<WriterSnapshot> snapshot_;

  // Session-thread state.
  bool have_step_ = false;
  uint32_t step_graph_ = 0;
  uint32_t step_iteration_ = 0;
  uint64_t client_dropped_reported_ = 0;
  // Dump once: the memos of this step's flagged tensors, by memoKey(sequence, tensor index).
  std::unordered_map<uint64_t, std::shared_ptr<storage::TensorMemo>> memos_;
};

}  // namespace dumpd::daemon
