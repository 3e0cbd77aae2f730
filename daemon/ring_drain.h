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
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/byte_budget.h"
#include "base/mutex.h"
#include "base/snapshot.h"
#include "config/dump_plan.h"
#include "config/filter.h"
#include "daemon/first_nonfinite.h"
#include "daemon/flight_recorder.h"
#include "daemon/log_limiter.h"
#include "daemon/op_task.h"
#include "daemon/release_queue.h"
#include "daemon/runtime_selection.h"
#include "daemon/session_warnings.h"
#include "daemon/trigger_outcome.h"
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

// Daemon memory a record the flight recorder keeps holds (charged to recorder_memory_bytes).
uint64_t keptRecordMemory(const OpTask& task);
// Sets task.nan_view and task.inf_view: the first view holding a NaN, and an infinity.
void findNonFinite(OpTask& task);

class RingDrain : public std::enable_shared_from_this<RingDrain> {
 public:
  RingDrain(uint64_t session_id, uint32_t rank, uint32_t device, config::DumpPlan plan,
            config::Filter filter, ipc::RingConsumer ring, std::shared_ptr<storage::FileSystem> fs,
            std::unique_ptr<storage::JobWriter> writer, storage::WriterPool& pool,
            std::function<void(uint64_t)> on_done);

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
  // Flight recorder (session thread). Whether it keeps records the ring needs for a producer
  // that waits for space (the drain loop then asks to be woken for that, and frees them).
  // The flight recorder stopped for good (max_triggers). Any thread.
  bool hasRecorder() const { return recorder_ != nullptr; }
  bool recorderExhausted() const { return recorder_ && recorder_->exhausted(); }
  bool recorderHoldsSpace() const { return recorder_ && recorder_->keptBytes() != 0; }
  // Releases kept records for a producer waiting for space; false when there were none.
  // `producer_waits`: training is waiting for that space (counted, and said once in the log
  // and status with the ring size that would avoid it).
  bool freeRecorderSpace(bool producer_waits = false);
  // Releases the records of an unanswered fetch whose client has answered since, or is gone
  // (`all`: the session ends). Cheap when there are none; the session thread calls it when
  // idle and at each step.
  void releaseAnswered(bool all = false);
  // A manual trigger (dumpctl trigger, or the client's Trigger record).
  void triggerManually(std::string reason);
  // The daemon-wide budget of memory the flight recorders' kept records share
  // (recorder_memory_bytes); before the first record.
  void setRecorderMemory(std::shared_ptr<ByteBudget> budget);
  // Runtime control: the selections clients name in their step marks, and the control.jsonl
  // lines of the changes, journalled before the line saying from which iteration one took
  // effect (set before the first record is handled).
  void setRuntimeSelection(std::shared_ptr<RuntimeSelection> s) { selection_ = std::move(s); }
  // Whether the client can still answer a fetch of tensors it keeps on its device (false
  // once it exited, said Goodbye, or the session is stopping). Session thread.
  void setProducerAlive(std::function<bool()> f) { producer_alive_ = std::move(f); }
  // The client's device staging (Hello): the recorder's sizing warning covers it too.
  void setDeviceStaging(uint64_t bytes) { device_staging_ = bytes; }
  // How long a fetch of those tensors may take (recorder_fetch_timeout_ms).
  void setFetchTimeout(std::chrono::milliseconds t) { fetch_timeout_ = t; }
  // Called (session thread) when the flight recorder stops after max_triggers.
  void setOnRecorderStopped(std::function<void()> f) { on_recorder_stopped_ = std::move(f); }
  // Journals `line` in .dump_metadata/`name` (session thread); failures become warnings.
  void appendJournal(std::string_view name, const std::string& line);
  // Status (io thread): false when the job has no flight recorder.
  bool fillRecorderStatus(v1::RecorderStatus* out) const;
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
  // Journal lines refused (journal_bytes, min_free_bytes). Any thread.
  uint64_t journalLinesRefused() const {
    return journal_lines_refused_.load(std::memory_order_relaxed);
  }
  uint32_t openDirectories() const { return open_dirs_.load(std::memory_order_relaxed); }
  std::shared_ptr<const WriterSnapshot> snapshot() const { return snapshot_.load(); }
  const config::DumpPlan& plan() const { return plan_; }
  // Free bytes of the dump file system (fstatvfs: may be slow; never on the io thread).
  std::optional<uint64_t> writerFreeBytes();

 private:
  // Whether the job dumps `iteration` (its selection, unless paused by dumpctl control).
  bool selected(uint32_t iteration) const {
    return !paused_ && filter_.iterationSelected(iteration);
  }
  // At a step mark that starts `from_iteration`: switches to the selection the client
  // applied (`named`), or to the one it was bound to apply by now when that is newer; never
  // back to an older one (ring_drain_control.cc).
  void takeSelection(uint64_t named, uint32_t from_iteration);
  void applySelection(const Selection& s, uint32_t from_iteration, std::string_view how);
  // An op record of `iteration` was written after dumpd sent a pause the drain has not
  // applied: applies the selection in force (paused) from that iteration.
  void enforcePause(uint32_t iteration);
  // handle() without the recorder's room check.
  bool dispatch(const ipc::RingConsumer::Record& r);
  bool handleOp(const ipc::RingConsumer::Record& r);
  // Step marks, graphs, constants, triggers, losses (ring_drain_control.cc).
  bool handleControl(const ipc::RingConsumer::Record& r);
  void completeStep();
  // Hands `task` (ring record `slot`, pushed or put back in flight) to the writer pool.
  void submitWrite(std::shared_ptr<OpTask> task, uint64_t slot);

  // Flight recorder (ring_drain_recorder.cc), session thread.
  // Keeps a record of a recorded iteration (pushed in flight): checks it for NaN and
  // infinities when a trigger needs that, then holds it.
  void keepRecord(std::shared_ptr<OpTask> task, uint64_t slot, uint64_t ring_bytes);
  // Gives kept iterations back, oldest first, until the producer has room for its records
  // (handle(), after every record while the recorder holds space).
  void keepRoomForProducer();
  // Releases records the recorder gave back (their dump-once memos say why).
  void releaseKept(std::vector<KeptRecord> records);
  // The NaN/infinity trigger over `iteration`, which just completed.
  void checkNonFinite(uint32_t iteration);
  void fire(TriggerEvent e);
  // Writer thread: checks a record a trigger writes for NaN and infinities (check_values).
  void offerNonFinite(OpTask& task);
  // A record of `iteration` went to the writers: the open trigger counts it.
  void noteWritten(uint32_t iteration) {
    if (trigger_ && trigger_->covers(iteration)) trigger_->wrote(iteration);
  }
  // Journals the open trigger with what it wrote (triggers.jsonl); `why_rest`: why the
  // iterations it was still to write did not come.
  void closeTrigger(std::string_view why_rest);
  // Ring bytes the recorder leaves free for the producer: a whole iteration (the producer
  // may be that far ahead of the drain), and twice the largest record with its header (one
  // that does not fit before the ring's end needs a pad record as well).
  uint64_t headroom() const {
    return (recorder_ ? recorder_->largestIterationBytes() : 0) + recordRoom();
  }
  // Room for the producer's next record: twice the largest record with its header.
  uint64_t recordRoom() const { return 2 * (largest_record_ + 2 * ipc::kRecordAlign); }
  // Tensors kept on the client's device (ring_drain_deferred.cc), session thread.
  // Checks a PayloadKind::kDeferred tensor's size, dtype and flags; false (after fail())
  // when the record is corrupt.
  bool deferredPayloadValid(uint64_t sequence, const ipc::DecodedOp& op,
                            const ipc::DecodedTensor& t, DType dtype,
                            const std::optional<uint64_t>& elements);
  // Asks the client for the deferred tensors of `tasks` (records up to iteration
  // `through_iteration` are to be sent whole from now on) and waits, bounded, until each is
  // filled or lost. Filled views get their bytes; lost ones are removed and counted as
  // failed; a task the client never answered for is marked abandoned. Returns the tensors
  // lost.
  uint64_t fetchDeferred(const std::vector<OpTask*>& tasks, uint32_t through_iteration);
  // Writes a task fetchDeferred resolved, held at `slot`: to the writers, or released when
  // nothing of it is left, or held until the client answers when abandoned. True: it went to
  // the writers.
  bool writeFetched(std::shared_ptr<OpTask> task, uint64_t slot);
  // Warns once, after the first recorded step, when the ring or max_bytes cannot hold
  // `steps` iterations like the largest recorded so far.
  void checkRecorderSizing();
  bool fail(std::string message);
  // Dump once: the memo a PayloadKind::kSame tensor names (key 0 when malformed), and the
  // checked memo of the tensor `t` repeats (null: counted as failed, with a warning).
  static uint64_t sameKey(const ipc::SamePayload& same);
  // `same`: t's payload, as copied out of the ring once.
  std::shared_ptr<storage::TensorMemo> repeatedTensor(uint64_t sequence, const ipc::DecodedOp& op,
                                                      const ipc::DecodedTensor& t,
                                                      const ipc::SamePayload& same, bool kept);
  // Dropped tensors reported by the client since the last manifest line (never negative).
  uint64_t takeClientDropped();

  const uint64_t id_;
  const uint32_t rank_;
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
  std::atomic<uint64_t> journal_lines_refused_{0};
  Snapshot<WriterSnapshot> snapshot_;

  // Session-thread state.
  bool have_step_ = false;
  uint32_t step_graph_ = 0;
  uint32_t step_iteration_ = 0;
  uint64_t client_dropped_reported_ = 0;
  // Dump once: the memos of this step's flagged tensors, by memoKey(sequence, tensor index).
  std::unordered_map<uint64_t, std::shared_ptr<storage::TensorMemo>> memos_;
  // Of those, the memos of records the flight recorder keeps (unwritten until a trigger).
  std::unordered_set<const storage::TensorMemo*> kept_memos_;
  std::shared_ptr<RuntimeSelection> selection_;
  uint64_t applied_generation_ = 0;
  uint64_t previous_mark_end_ = 0;  // ring position after the last step mark
  // Info lines a client can cause (selections, triggers): rate-limited like its warnings.
  LogLimiter info_log_{5, std::chrono::seconds(10)};
  std::function<void()> on_recorder_stopped_;
  bool recorder_stop_told_ = false;
  bool paused_ = false;
  // The flight recorder (null: the job has none); its sizing warning is given once. The
  // budget its kept records are charged to outlives it.
  std::shared_ptr<ByteBudget> recorder_memory_;
  std::unique_ptr<FlightRecorder> recorder_;
  // The trigger whose iterations are being written (journalled when they are done).
  std::optional<TriggerOutcome> trigger_;
  // What the writers found of the records a trigger writes (a recorder without nan/inf
  // triggers does not check them as it keeps them).
  FirstNonFinite writers_nonfinite_;
  bool recorder_sized_ = false;
  uint64_t largest_record_ = 0;  // ring bytes of the largest record seen
  std::function<bool()> producer_alive_;
  uint64_t device_staging_ = 0;
  std::chrono::milliseconds fetch_timeout_{30000};
  // Staging bytes the client holds for each recorded iteration (its deferred tensors), and
  // the largest so far.
  uint32_t deferred_iteration_ = 0;
  uint64_t deferred_iteration_bytes_ = 0;
  uint64_t largest_deferred_iteration_ = 0;
  // A fetch the client did not answer in time: later ones do not wait until it has. Its
  // records (abandoned) stay held until their states say the client is done with them, or it
  // is gone (a late copy may still land there).
  bool fetch_unanswered_ = false;
  std::deque<KeptRecord> abandoned_;
};

}  // namespace dumpd::daemon
