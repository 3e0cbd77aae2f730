// What an operator changed of a running job (dumpctl control, docs/recorder.md): the
// iteration selection, pause, the flight recorder on or off, and how often the job checks its
// replicas. Each change is a new
// generation; the daemon sends it to the client (SelectionUpdate), and the client names the
// generation it applied in its next StepMark, where the drain switches too (find()).
//
// The client is bound to apply a generation by its second step mark after dumpd sent it (it
// reads its socket at every step mark): the drain enforces it from there whatever the
// client says (boundBefore()), and never goes back to an older generation.
//
// Thread-safety: every method may be called from any thread; mu_ guards plain data only and
// is never held across anything else.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "config/iteration_set.h"
#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

struct Selection {
  uint64_t generation = 0;
  std::string iteration;  // canonical ("all", "0|5-8")
  // `iteration` parsed once (never at a step mark); null only for a default Selection.
  std::shared_ptr<const config::IterationSet> iterations;
  bool paused = false;
  bool recorder_on = true;
  // dumpctl control --replica-every: the replica check's period the job's ranks agree on
  // (docs/replicas.md); 0: the job's own.
  uint32_t replica_every = 0;
  // The client's ring position (bytes committed) when dumpd sent it: step marks that end
  // past it were written after.
  uint64_t sent_at = 0;
  // Who made the last change: "uid 1000", or "dumpd (the flight recorder stopped after
  // max_triggers)"; empty for the job config's own selection.
  std::string changed_by;
};

class RuntimeSelection {
 public:
  // `has_recorder`: whether the job has a flight recorder (else recorder changes are refused).
  // `initial.iteration` must be canonical (IterationSet::toString()).
  RuntimeSelection(Selection initial, bool has_recorder);

  // Checks and applies `change` requested by `uid` (nullopt: dumpd itself, for `reason`),
  // sent when the client's ring stood at `ring_position`: the new selection, or an error
  // naming the bad value (kInvalidConfig: the message `dumpctl validate` gives for it;
  // kInvalidArgument: nothing to change, a change that changes nothing (the message says
  // what already holds), or a list past the limits below). Queues a line
  // for .dump_metadata/control.jsonl (takeJournal()), with long lists summarised.
  Result<Selection> change(const v1::ControlChange& change, std::optional<uint32_t> uid,
                           uint64_t time_us, uint64_t ring_position = 0,
                           std::string_view reason = {});
  // The selection of a generation a client applied (the last kMaxKept are kept).
  std::optional<Selection> find(uint64_t generation) const;
  // The newest generation sent before the ring reached `ring_position` (the client must have
  // applied it by a step mark after that position). Cheap: called at every step mark.
  uint64_t boundBefore(uint64_t ring_position) const;
  Selection current() const;
  bool changed() const;
  // The client's ring position from which the selection in force pauses the job (the
  // position when dumpd sent the pause), or UINT64_MAX while it does not pause. A record that
  // starts past it was written after the pause was sent: the drain enforces the pause on it
  // even when no step mark comes. Lock-free: the drain asks it for every op record.
  uint64_t pausedFrom() const { return paused_from_.load(std::memory_order_acquire); }
  // Journal lines not yet written (the session thread appends them).
  std::vector<std::string> takeJournal();

  static constexpr size_t kMaxKept = 64;
  // The longest replica check period dumpctl control may set.
  static constexpr uint32_t kMaxReplicaEvery = 1000000;
  // An iteration list dumpctl control may set: its text and its ranges once merged.
  static constexpr size_t kMaxIterationBytes = 64 << 10;
  static constexpr size_t kMaxIterationRanges = 4096;
  // Journal lines hold at most this much of a list (then "...", and the count of ranges).
  static constexpr size_t kMaxJournalIterationBytes = 256;
  // Journal lines queued before the session thread writes them; older ones are counted.
  static constexpr size_t kMaxQueuedJournalLines = 256;

 private:
  const bool has_recorder_;
  mutable Mutex mu_;
  std::deque<Selection> recent_ GUARDED_BY(mu_);  // oldest first; back() is current
  std::vector<std::string> journal_ GUARDED_BY(mu_);
  uint64_t journal_dropped_ GUARDED_BY(mu_) = 0;  // lines beyond kMaxQueuedJournalLines
  std::atomic<uint64_t> paused_from_{UINT64_MAX};
};

}  // namespace dumpd::daemon
