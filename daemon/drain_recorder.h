// The flight recorder's part of one session's drain (docs/recorder.md): keeps the records of
// recorded iterations in the ring and checks them for NaN and infinities, gives ring space
// back before the producer runs short, fires triggers, writes what they keep and what comes
// after them (fetching tensors kept on the client's device first), and journals what each
// trigger wrote (triggers.jsonl). What is kept and when a trigger fires is FlightRecorder's
// policy; the drain decides what each record is and hands it here.
//
// Thread-safety: the session thread, except where a method says otherwise.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/byte_budget.h"
#include "config/flight_recorder.h"
#include "daemon/device_fetch.h"
#include "daemon/drain_counters.h"
#include "daemon/dump_once_table.h"
#include "daemon/first_nonfinite.h"
#include "daemon/flight_recorder.h"
#include "daemon/log_limiter.h"
#include "daemon/op_task.h"
#include "daemon/release_queue.h"
#include "daemon/session_warnings.h"
#include "daemon/trigger_outcome.h"
#include "ipc/shm_ring.h"
#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

// Daemon memory a record the flight recorder keeps holds (charged to recorder_memory_bytes).
uint64_t keptRecordMemory(const OpTask& task);
// Sets task.nan_view and task.inf_view: the first view holding a NaN, and an infinity.
void findNonFinite(OpTask& task);

// The step the drain is in (the last step mark, or the first record's step).
struct DrainStep {
  bool started = false;
  uint32_t graph = 0;
  uint32_t iteration = 0;
};

// What the recorder asks of the drain it serves.
class RecorderOutput {
 public:
  virtual ~RecorderOutput() = default;
  // Hands `task`, the record at `slot` (in flight), to the writers.
  virtual void write(std::shared_ptr<OpTask> task, uint64_t slot) = 0;
  // Completes an earlier iteration a trigger wrote; `cut`: why it is partial.
  virtual void completeIteration(uint32_t graph, uint32_t iteration, const std::string& cut) = 0;
  // Appends `line` to .dump_metadata/triggers.jsonl.
  virtual void journalTrigger(const std::string& line) = 0;
};

class DrainRecorder {
 public:
  struct Settings {
    // The daemon-wide budget kept records are charged to (recorder_memory_bytes); it
    // outlives the recorder. Null: unbounded.
    std::shared_ptr<ByteBudget> memory;
    DeviceFetch::Settings device;
    // Called when the recorder stops for good (max_triggers) and its last trigger's
    // iterations are written: the client stops copying what nobody records.
    std::function<void()> on_stopped;
  };
  // What the recorder shares with its drain.
  struct Drain {
    ipc::RingConsumer& ring;
    ReleaseQueue& release;
    DrainCounters& counters;
    SessionWarnings& warnings;
    LogLimiter& info_log;  // info lines a client can cause
    const DrainStep& step;
    DumpOnceTable& dump_once;
    RecorderOutput& output;
  };

  DrainRecorder(uint64_t session_id, uint32_t rank, config::FlightRecorderPlan plan,
                Settings settings, Drain drain);

  // Routing a record of `iteration` the job's selection does not dump: written after a
  // trigger, or kept.
  bool writes(uint32_t iteration) const { return recorder_.writes(iteration); }
  bool recording() const { return recorder_.recording(); }
  // A record was routed here (its ring bytes): room for the producer's next one is kept.
  void sawRecord(uint64_t body_bytes) { largest_record_ = std::max(largest_record_, body_bytes); }
  // Keeps a record of a recorded iteration held at `slot`: checks it for NaN and infinities
  // when a trigger needs that, then holds it (or gives older iterations back).
  void keep(std::shared_ptr<OpTask> task, uint64_t slot, uint64_t ring_bytes);
  // Writes a record of an iteration after a trigger (its tensors kept on the device are
  // fetched first), pushed in flight at `slot`.
  void writeAfterTrigger(std::shared_ptr<OpTask> task, uint64_t slot);
  // A record of `iteration` went to the writers: the open trigger counts it.
  void wrote(uint32_t iteration) {
    if (trigger_ && trigger_->covers(iteration)) trigger_->wrote(iteration);
  }

  // Whether kept records hold ring space; then, after every record, keepRoom() gives kept
  // iterations back, oldest first, until the producer has room for its records.
  bool holdsSpace() const { return recorder_.keptBytes() != 0; }
  void keepRoom();
  // Releases kept records for a producer waiting for space; false when there were none.
  // `producer_waits`: training is waiting for that space (counted, and said once in the log
  // and status with the ring size that would avoid it).
  bool freeSpace(bool producer_waits);
  // The recorder stopped for good (max_triggers). Any thread.
  bool exhausted() const { return recorder_.exhausted(); }

  // Triggers.
  void triggerManually(std::string reason);
  void onLoss(uint32_t iteration, double value);
  // The client found that the replicas of a tensor differ (docs/replicas.md).
  void onReplicaMismatch(TriggerEvent::Replicas r);
  // dumpctl control turned the recorder on or off (off: what it keeps is released).
  void setEnabled(bool on);
  // Writer thread: checks a record a trigger writes for NaN and infinities (check_values).
  void offerNonFinite(OpTask& task);

  // The step `iteration` is complete and its records are done: the NaN/infinity trigger,
  // the sizing warning, late answers of the client.
  void stepEnds(uint32_t iteration);
  // Why `iteration` was written only in part (empty: whole, or no trigger writes it).
  std::string cutShort(uint32_t iteration) const;
  // After the step's directory is complete: the open trigger counts it, and is journalled
  // after its last iteration.
  void stepCompleted(uint32_t iteration);
  // The session ends, unless dumpd is stopping: the NaN/infinity trigger over the step in
  // progress, and the crash trigger on what is kept when `producer_lost`.
  void sessionEnds(bool producer_lost);
  // Then: journals the open trigger (`why_rest`: why its iterations did not all come) and
  // releases every record held.
  void close(std::string_view why_rest);
  // Releases the records of a fetch the client did not answer in time, once it has, or is
  // gone (`all`: the session ends).
  void releaseAnswered(bool all = false) { device_.releaseAnswered(all); }

  // Status (io thread).
  void fillStatus(v1::RecorderStatus* out) const { recorder_.fillStatus(out); }

 private:
  // Writes a record held at `slot` that a fetch resolved: to the writers, or released when
  // nothing of it is left, or held until the client answers when abandoned. True: it went to
  // the writers.
  bool writeHeld(std::shared_ptr<OpTask> task, uint64_t slot);
  // Releases records the recorder gave back (their dump-once memos say why).
  void releaseKept(std::vector<KeptRecord> records);
  // The NaN/infinity trigger over `iteration`, which just completed.
  void checkNonFinite(uint32_t iteration);
  void fire(TriggerEvent e);
  // Journals the open trigger with what it wrote (triggers.jsonl); `why_rest`: why the
  // iterations it was still to write did not come.
  void closeTrigger(std::string_view why_rest);
  // Warns once, after the first recorded step, when the ring, max_bytes or the device
  // staging cannot hold `steps` iterations like the largest recorded so far.
  void checkSizing();
  uint64_t fetch(const std::vector<OpTask*>& tasks, uint32_t through_iteration) {
    return device_.fetch(tasks, through_iteration);
  }
  // Ring bytes left free for the producer: a whole iteration (the producer may be that far
  // ahead of the drain), and room for its next record.
  uint64_t headroom() const { return recorder_.largestIterationBytes() + recordRoom(); }
  // Room for the producer's next record: twice the largest record with its header (one that
  // does not fit before the ring's end needs a pad record as well).
  uint64_t recordRoom() const { return 2 * (largest_record_ + 2 * ipc::kRecordAlign); }

  const uint64_t id_;
  const uint32_t rank_;
  const std::shared_ptr<ByteBudget> memory_;  // outlives recorder_, which charges it
  FlightRecorder recorder_;
  Drain drain_;
  DeviceFetch device_;
  std::function<void()> on_stopped_;
  bool stop_told_ = false;
  // The trigger whose iterations are being written (journalled when they are done).
  std::optional<TriggerOutcome> trigger_;
  // What the writers found of the records a trigger writes (a recorder without nan/inf
  // triggers does not check them as it keeps them). Any thread.
  FirstNonFinite writers_nonfinite_;
  bool sized_ = false;           // the sizing warning was considered
  uint64_t largest_record_ = 0;  // ring bytes of the largest record seen
};

}  // namespace dumpd::daemon
