// The flight recorder's policy for one session (docs/recorder.md): which iterations it keeps,
// which ones a trigger writes, when a trigger fires, and its figures for status. The drain
// (daemon/ring_drain.h) does the I/O: it holds the kept records in the ring, writes or
// releases what this class hands back.
//
// Thread-safety: the session thread calls everything but status(), which reads atomics and a
// Snapshot (the io thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/snapshot.h"
#include "config/flight_recorder.h"
#include "daemon/kept_iterations.h"
#include "daemon/loss_spike.h"
#include "daemon/op_task.h"
#include "daemon/trigger_outcome.h"
#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

// A record the recorder keeps: its decoded op and its ReleaseQueue slot.
struct KeptRecord {
  std::shared_ptr<OpTask> task;
  uint64_t slot = 0;
};

class FlightRecorder {
 public:
  using Kept = KeptIterations<KeptRecord>;
  // Records kept at most per session: each holds a decoded descriptor in daemon memory
  // (keep() is given its ring bytes plus that memory, so max_bytes bounds both).
  static constexpr uint64_t kMaxKeptRecords = uint64_t{1} << 18;

  explicit FlightRecorder(config::FlightRecorderPlan plan);

  const config::FlightRecorderPlan& plan() const { return plan_; }
  // Keeps records of unselected iterations: on, and fewer than max_triggers triggers so far.
  bool recording() const {
    return enabled_.load(std::memory_order_relaxed) && recording_.load(std::memory_order_relaxed);
  }
  // Stopped for good: max_triggers triggers fired.
  bool exhausted() const { return !recording_.load(std::memory_order_relaxed); }
  // Whether iterations after `iteration` are still to be written for a trigger.
  bool writesAfter(uint32_t iteration) const { return window_ && window_->last > iteration; }
  // The last iteration the current trigger writes (0: none).
  uint32_t windowLast() const { return window_ ? window_->last : 0; }
  // dumpctl control --recorder on|off.
  void setEnabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  // True for the iterations a trigger writes as they come (the `after_steps` after it, and
  // the rest of the iteration it fired during).
  bool writes(uint32_t iteration) const {
    return window_ && iteration >= window_->first && iteration <= window_->last;
  }
  // Whether a trigger of this kind would fire now.
  bool accepts(config::RecorderTrigger kind) const { return recording() && plan_.has(kind); }
  // Whether kept records need the NaN/infinity check.
  bool checksValues() const {
    return plan_.has(config::RecorderTrigger::kNan) || plan_.has(config::RecorderTrigger::kInf);
  }

  // The daemon-wide budget of memory that kept records hold (recorder_memory_bytes); set
  // before the first keep().
  void setMemoryBudget(ByteBudget* memory) { kept_.setMemoryBudget(memory); }
  // Keeps `r` (`bytes` counted against max_bytes, `memory` of them daemon memory charged to
  // the shared budget) of `iteration`; returns the records to release now.
  std::vector<KeptRecord> keep(uint32_t iteration, KeptRecord r, uint64_t bytes,
                               uint64_t memory = 0);
  // Frees ring space for a producer that waits: the oldest iteration, or the current one's
  // records when it is the only one (it then counts as not kept whole). Empty: nothing kept.
  std::vector<KeptRecord> discardForSpace();
  // Everything kept (the session ends without a trigger).
  std::vector<KeptRecord> releaseAll();
  uint64_t keptIterations() const { return kept_.iterations(); }
  // The kept iterations discarded whole for the shared memory budget since the last call
  // (at most `steps`), for the trigger that fires now.
  std::vector<uint32_t> takeGivenUpForMemory() { return kept_.takeGivenUpForMemory(); }
  // Ring bytes of the largest iteration recorded so far (kept or not).
  uint64_t largestIterationBytes() const { return largest_iteration_; }
  // Ring bytes of the records kept now (0 when discardForSpace() emptied the current
  // iteration: it is still being recorded, but holds nothing).
  uint64_t keptBytes() const { return kept_.bytes(); }
  // The newest kept iteration (the one being recorded), or null.
  const Kept::Iteration* newest() const { return kept_.newest(); }
  // Calls f(iteration, record) for each kept record, oldest iteration first, records in
  // order, until f returns false.
  template <typename F>
  void forEachKept(F&& f) const {
    kept_.forEach(f);
  }

  // A reported loss; a spike (or a non-finite loss) yields the event to fire.
  std::optional<TriggerEvent> onLoss(uint32_t iteration, double loss);

  // Fires `e` (the caller checked accepts()): hands over every kept iteration, oldest first,
  // and writes the iterations up to e.iteration + after_steps as they come. Recording stops
  // after max_triggers.
  std::vector<Kept::Iteration> fire(TriggerEvent& e);

  // The status warning (ring or max_bytes too small for `steps` iterations), once.
  void setWarning(std::string warning);
  bool hasWarning() const { return !warning_.load()->empty(); }
  // Training waited for ring space while this recorder held some (counted for status).
  void countProducerWait() { producer_waits_.fetch_add(1, std::memory_order_relaxed); }
  void fillStatus(v1::RecorderStatus* out) const;

 private:
  struct Window {
    uint32_t first;
    uint32_t last;
  };
  void publishCounts();

  const config::FlightRecorderPlan plan_;
  Kept kept_;
  LossSpikeDetector losses_;
  std::optional<Window> window_;
  uint32_t fired_ = 0;
  uint32_t counting_iteration_ = 0;  // the iteration iteration_bytes_ adds up
  uint64_t iteration_bytes_ = 0;
  uint64_t largest_iteration_ = 0;

  std::atomic<bool> recording_{true};  // false after max_triggers
  std::atomic<bool> enabled_{true};
  std::atomic<uint32_t> kept_iterations_{0};
  std::atomic<uint64_t> kept_bytes_{0};
  std::atomic<uint64_t> not_whole_{0};
  std::atomic<uint64_t> discarded_for_space_{0};
  std::atomic<uint64_t> producer_waits_{0};
  std::atomic<uint64_t> refused_for_memory_{0};
  std::atomic<uint64_t> discarded_for_memory_{0};
  std::atomic<uint32_t> triggers_{0};
  Snapshot<std::string> last_trigger_;
  Snapshot<std::string> warning_;
};

}  // namespace dumpd::daemon
