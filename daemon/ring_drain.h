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
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/snapshot.h"
#include "config/dump_plan.h"
#include "config/filter.h"
#include "daemon/drain_counters.h"
#include "daemon/drain_recorder.h"
#include "daemon/dump_once_table.h"
#include "daemon/log_limiter.h"
#include "daemon/op_task.h"
#include "daemon/release_queue.h"
#include "daemon/replica_reports.h"
#include "daemon/runtime_selection.h"
#include "daemon/session_warnings.h"
#include "daemon/tensor_check.h"
#include "ipc/op_codec.h"
#include "ipc/shm_ring.h"
#include "proto/dumpd.pb.h"
#include "storage/writer/job_writer.h"
#include "storage/writer/writer_pool.h"

namespace dumpd::daemon {

// Figures the session thread refreshes for status (the io thread reads them as a Snapshot).
struct WriterSnapshot {
  std::string stop_reason;
  std::vector<std::string> unused_kernels;  // at most kMaxListedKernels
  uint32_t unused_kernels_total = 0;
};
inline constexpr size_t kMaxListedKernels = 64;

// Who a session is: for logs, the dump tree's rank directory and the device filter.
struct DrainIds {
  uint64_t session = 0;
  uint32_t rank = 0;
  uint32_t device = 0;
};

// What a session gives its drain besides the job, the ring and the writer. All optional.
struct DrainLinks {
  // Called (any thread) as records are released, with the last sequence released.
  std::function<void(uint64_t)> on_done;
  // Runtime control: the selections clients name in their step marks, and the control.jsonl
  // lines of the changes, journalled before the line saying from which iteration one took
  // effect. Null: the selection is the job's for good.
  std::shared_ptr<RuntimeSelection> selection;
  // Used when the job has a flight recorder.
  DrainRecorder::Settings recorder;
};

class RingDrain : public std::enable_shared_from_this<RingDrain>, private RecorderOutput {
 public:
  RingDrain(DrainIds ids, config::DumpPlan plan, config::Filter filter, ipc::RingConsumer ring,
            std::shared_ptr<storage::FileSystem> fs, std::unique_ptr<storage::JobWriter> writer,
            storage::WriterPool& pool, DrainLinks links = {});

  // Handles one record. False when the session must end: error() says why (a corrupt record
  // is the client's fault and ends only its own session).
  bool handle(const ipc::RingConsumer::Record& r);
  // How a session ended, as finish() needs it.
  enum class SessionEnd {
    kClosed,        // the job closed its session (Goodbye, or its ring ran dry after one)
    kProducerLost,  // the client went away without closing it (killed, crashed): the flight
                    // recorder's "crash" trigger writes what it keeps first
    kShutdown,      // dumpd is stopping: no trigger fires; what is kept is released
  };
  // Waits for every record in flight, completes the open iterations, logs the unused kernels.
  void finish(SessionEnd end = SessionEnd::kClosed);

  // The flight recorder's part (null: the job has none). Session thread, except where
  // DrainRecorder says otherwise.
  DrainRecorder* recorder() { return recorder_.get(); }
  const DrainRecorder* recorder() const { return recorder_.get(); }
  // Whether the recorder keeps records the ring needs; a producer waiting for space then
  // gets them back (DrainRecorder::freeSpace).
  bool recorderHoldsSpace() const { return recorder_ && recorder_->holdsSpace(); }
  // The flight recorder stopped for good (max_triggers). Any thread.
  bool recorderExhausted() const { return recorder_ && recorder_->exhausted(); }
  // Journals `line` in .dump_metadata/`name` (session thread); failures become warnings.
  void appendJournal(std::string_view name, const std::string& line);
  // Refreshes the figures status shows (writer counters, stop reason, unused kernels); free
  // space is writerFreeBytes()'s.
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
  // Journal lines refused (journal_bytes, min_free_bytes). Any thread.
  uint64_t journalLinesRefused() const {
    return journal_lines_refused_.load(std::memory_order_relaxed);
  }
  uint32_t openDirectories() const { return open_dirs_.load(std::memory_order_relaxed); }
  std::shared_ptr<const WriterSnapshot> snapshot() const { return snapshot_.load(); }
  // Replica mismatches the client reported. Any thread.
  const ReplicaReports& replicaReports() const { return replicas_; }
  const config::DumpPlan& plan() const { return plan_; }
  // Free bytes of the dump file system (fstatvfs: may be slow; never on the io thread).
  std::optional<uint64_t> writerFreeBytes();

 private:
  // Where a record's iteration goes, decided once per record.
  enum class Route {
    kDumped,        // the job's selection dumps it
    kAfterTrigger,  // the flight recorder writes it (after a trigger)
    kKept,          // the flight recorder keeps it
    kNotDumped,     // nothing: every tensor is filtered
  };
  Route route(uint32_t iteration) const;
  // Whether the job dumps `iteration` (its selection, unless paused by dumpctl control).
  bool selected(uint32_t iteration) const {
    return !paused_ && filter_.iterationSelected(iteration);
  }
  // Whether `iteration` is written: selected, or written by the flight recorder.
  bool written(uint32_t iteration) const {
    return selected(iteration) || (recorder_ && recorder_->writes(iteration));
  }
  // At a step mark that starts `from_iteration`: switches to the selection the client
  // applied (`named`), or to the one it was bound to apply by now when that is newer; never
  // back to an older one (ring_drain_control.cc).
  void takeSelection(uint64_t named, uint32_t from_iteration);
  void applySelection(const Selection& s, uint32_t from_iteration, std::string_view how);
  // An op record of `iteration` was written after dumpd sent a pause the drain has not
  // applied: applies the selection in force (paused) from that iteration.
  void enforcePause(uint32_t iteration);
  // A client's report that the replicas of a tensor differ (docs/replicas.md).
  void takeReplicaMismatch(const v1::ReplicaMismatch& m);
  // handle() without the recorder's room check.
  bool dispatch(const ipc::RingConsumer::Record& r);
  bool handleOp(const ipc::RingConsumer::Record& r);
  // The first record of a session starts its step; a record of another step enforces a
  // pause the client has not applied.
  void noteStep(const ipc::RingConsumer::Record& r, const ipc::DecodedOp& op);
  // The view of checked tensor `t` (index `index` of the record), with its dump-once memo;
  // false when it repeats a tensor that cannot be used (counted as failed, with a warning).
  bool addView(OpTask& task, uint64_t sequence, uint32_t index, const CheckedTensor& c, bool kept);
  // Step marks, graphs, constants, triggers, losses (ring_drain_control.cc).
  bool handleControl(const ipc::RingConsumer::Record& r);
  void completeStep();
  // RecorderOutput: the writers, the job writer and its journal, for the flight recorder.
  void write(std::shared_ptr<OpTask> task, uint64_t slot) override;
  void completeIteration(uint32_t graph, uint32_t iteration, const std::string& cut) override;
  void journalTrigger(const std::string& line) override { appendJournal("triggers.jsonl", line); }
  bool fail(std::string message);
  // Dropped tensors reported by the client since the last manifest line (never negative).
  uint64_t takeClientDropped();

  const DrainIds ids_;
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
  std::atomic<uint64_t> journal_lines_refused_{0};
  Snapshot<WriterSnapshot> snapshot_;

  // Session-thread state.
  DrainStep step_;
  uint64_t client_dropped_reported_ = 0;
  DumpOnceTable dump_once_;
  ReplicaReports replicas_;
  const std::shared_ptr<RuntimeSelection> selection_;
  uint64_t applied_generation_ = 0;
  uint64_t previous_mark_end_ = 0;  // ring position after the last step mark
  bool paused_ = false;
  // Info lines a client can cause (selections, triggers): rate-limited like its warnings.
  LogLimiter info_log_{5, std::chrono::seconds(10)};
  std::unique_ptr<DrainRecorder> recorder_;  // last: it refers to the members above
};

}  // namespace dumpd::daemon
