// What one flight recorder trigger wrote, for its triggers.jsonl line (docs/recorder.md): the
// iteration directories written, exactly, and each iteration it was to write but did not, or
// wrote only in part, with why. The line is journalled when the trigger's last iteration is
// done, or when the session ends first: only then is what reached disk known.
//
// Thread-safety: none; the session thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <vector>

#include <nlohmann/json.hpp>

#include "config/flight_recorder.h"

namespace dumpd::daemon {

// Why a trigger fired; the drain adds what it wrote and journals it (triggers.jsonl).
struct TriggerEvent {
  config::RecorderTrigger kind = config::RecorderTrigger::kManual;
  uint32_t iteration = 0;      // the iteration it fired during
  std::string reason;          // manual: the caller's text; others: a description
  std::string op_name;         // nan/inf: the first offending op in execution order
  std::string tensor;          // nan/inf: "output 0"
  std::vector<double> losses;  // loss_spike: the window, oldest first, the new loss last
  // What it wrote, known when its last iteration is done (daemon/trigger_outcome.h): the
  // iteration directories written, oldest first; the iterations it was to write but did not
  // (ranges), and those written in part, with why.
  struct NotWritten {
    uint32_t first = 0;
    uint32_t last = 0;
    std::string why;
  };
  struct NotWhole {
    uint32_t iteration = 0;
    std::string why;
  };
  std::vector<uint32_t> written;
  std::vector<NotWritten> not_written;
  std::vector<NotWhole> not_whole;
  // Whatever fired: the first NaN or infinity in the kept iterations (oldest first, records in
  // the job's order), where the user looks next. Known when the recorder checks values (a
  // "nan" or "inf" trigger configured).
  struct NonFinite {
    uint32_t iteration = 0;
    std::string op_name;
    std::string tensor;  // "output 0"
    bool nan = true;     // else an infinity
  };
  std::optional<NonFinite> first_nonfinite;
  // replica_mismatch: the tensor whose replicas differ, as the client reported it
  // (docs/replicas.md).
  struct Replicas {
    uint32_t iteration = 0;  // the step compared
    std::string tensor;
    uint32_t group_size = 0;
    uint64_t majority = 0;  // the digest most ranks hold
    // The ranks that differ from it, with their digests (at most kMaxDifferingListed).
    std::vector<std::pair<uint32_t, uint64_t>> differing;
    uint32_t differing_count = 0;
    // "grad:fc.weight at iteration 30: rank 3 of 4 differs"
    std::string text() const;
    nlohmann::json toJson() const;
  };
  static constexpr size_t kMaxDifferingListed = 64;
  std::optional<Replicas> replicas;
  // Tensors the client kept on its device that never reached the host (crash: the device
  // memory went with the process; or the snapshot was given up for staging space).
  uint64_t device_tensors_lost = 0;

  // One line of triggers.jsonl (without the newline). `time_us`: wall clock.
  std::string toJsonLine(uint64_t time_us, uint32_t rank) const;
  // "nan at iteration 17: Default/Mul-op3 output 0"
  std::string summary() const;
  // "wrote iterations 7-9; not written: 10 (the job closed its session first)"
  std::string outcomeSummary() const;
};

class TriggerOutcome {
 public:
  // `e` fired; it writes the kept iterations handed over and those up to `last`.
  TriggerOutcome(TriggerEvent e, uint32_t last) : event_(std::move(e)), last_(last) {}

  const TriggerEvent& event() const { return event_; }
  uint32_t last() const { return last_; }

  // A kept iteration handed over: `records` of it were kept, `written` of them went to the
  // writers (the others' tensors stayed on the client's device and were lost); `whole` when
  // none was discarded to make room.
  void kept(uint32_t iteration, size_t records, size_t written, bool whole);
  // A record of `iteration` went to the writers while this trigger is open. Iterations it
  // does not cover are not remembered (the job chooses its iterations, in any order: what
  // this keeps is bounded by the window, at most after_steps + 1 iterations, and the kept
  // ones handed over).
  void wrote(uint32_t iteration) {
    if (covers(iteration)) written_.insert(iteration);
  }
  // A record of `iteration` came, but none of its tensors could be written (they stayed on
  // the client's device and were lost).
  void lost(uint32_t iteration) {
    if (covers(iteration)) lost_.insert(iteration);
  }
  // A kept iteration discarded whole before the trigger, for the recorders' shared memory
  // (recorder_memory_bytes).
  void givenUpForMemory(uint32_t iteration) { memory_.insert(iteration); }
  // The job finished `iteration` (the step mark after it came).
  void stepDone(uint32_t iteration) {
    if (covers(iteration)) done_.insert(iteration);
  }
  // Iterations remembered (for tests: bounded by the window and the kept iterations).
  size_t remembered() const {
    return written_.size() + done_.size() + not_whole_.size() + discarded_.size() + lost_.size() +
           memory_.size();
  }
  // Why what this trigger writes of `iteration` is not all the job dumped in it (records
  // discarded to make room, tensors lost on the client's device); empty when it is.
  std::string cutShort(uint32_t iteration) const;
  // Whether `iteration` is among those this trigger writes as they come.
  bool covers(uint32_t iteration) const {
    return iteration >= event_.iteration && iteration <= last_;
  }

  // The event with exactly what was written. `started`: the last iteration the job started
  // (none: it started none under this trigger); `why_rest` says why the iterations from it
  // up to last() did not come ("the job closed its session first", ...).
  TriggerEvent close(std::optional<uint32_t> started, std::string_view why_rest);

 private:
  TriggerEvent event_;
  const uint32_t last_;
  std::set<uint32_t> written_;
  std::set<uint32_t> done_;
  std::map<uint32_t, std::string> not_whole_;
  std::set<uint32_t> discarded_;  // kept, but nothing of it was left
  std::set<uint32_t> lost_;
  std::set<uint32_t> memory_;  // kept, then discarded for the shared memory budget
};

}  // namespace dumpd::daemon
