// What an operator changed of a running job (dumpctl control, docs/recorder.md): the
// iteration selection, pause, and the flight recorder on or off. Each change is a new
// generation; the daemon sends it to the client (SelectionUpdate), and the client names the
// generation it applied in its next StepMark, where the drain switches too (find()).
//
// Thread-safety: every method may be called from any thread; mu_ guards plain data only and
// is never held across anything else.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

struct Selection {
  uint64_t generation = 0;
  std::string iteration;  // canonical ("all", "0|5-8")
  bool paused = false;
  bool recorder_on = true;
};

class RuntimeSelection {
 public:
  // `has_recorder`: whether the job has a flight recorder (else recorder changes are refused).
  RuntimeSelection(Selection initial, bool has_recorder);

  // Checks and applies `change` requested by `uid`: the new selection, or an error naming the
  // bad value (kInvalidConfig: the message `dumpctl validate` gives for it). Queues a line for
  // .dump_metadata/control.jsonl (takeJournal()); `reason`, when given, is journalled too
  // (a change dumpd makes itself).
  Result<Selection> change(const v1::ControlChange& change, uint32_t uid, uint64_t time_us,
                           std::string_view reason = {});
  // The selection of a generation a client applied (the last kMaxKept are kept).
  std::optional<Selection> find(uint64_t generation) const;
  Selection current() const;
  bool changed() const;
  // Journal lines not yet written (the session thread appends them).
  std::vector<std::string> takeJournal();

  static constexpr size_t kMaxKept = 64;

 private:
  const bool has_recorder_;
  mutable Mutex mu_;
  std::deque<Selection> recent_ GUARDED_BY(mu_);  // oldest first; back() is current
  std::vector<std::string> journal_ GUARDED_BY(mu_);
};

}  // namespace dumpd::daemon
