// DumpSession: what an operator asks of a live session (dumpctl trigger and control, see
// daemon/session_command.h), and the flight recorder telling the client it stopped.
// The io-thread side checks and posts; the session thread takes the requests in its loop.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>

#include "base/utf8.h"
#include "daemon/clock.h"
#include "daemon/dump_session.h"
#include "daemon/log_escape.h"

namespace dumpd::daemon {
namespace {

std::string replicaText(const Selection& s) {
  return s.replica_every == 0
             ? std::string()
             : ", replicas checked every " + std::to_string(s.replica_every) + " steps";
}

}  // namespace

std::string DumpSession::netName() const {
  auto info = info_.load();
  return info ? info->net_name : std::string();
}

std::string DumpSession::triggerRefusal() const {
  const std::string name = "session " + std::to_string(id_);
  if (!ready_.load(std::memory_order_acquire) || state_.load() != State::kActive) {
    return name + " is not dumping (still starting, or ending)";
  }
  const auto& recorder = drain_->plan().flight_recorder;
  if (!recorder) return name + " has no flight recorder (the job config's flight_recorder)";
  if (!recorder->has(config::RecorderTrigger::kManual)) {
    return name + "'s flight recorder does not take manual triggers (flight_recorder.triggers)";
  }
  v1::RecorderStatus st;
  drain_->recorder()->fillStatus(&st);  // the plan has a recorder
  if (drain_->recorderExhausted()) {
    return name + "'s flight recorder stopped after " + std::to_string(st.triggers()) +
           " trigger(s) (flight_recorder.max_triggers " + std::to_string(recorder->max_triggers) +
           ")";
  }
  // The operator's word counts from when it is given, before the client applies it.
  if (const Selection sel = selection_->current(); !sel.recorder_on || !st.recording()) {
    return name + "'s flight recorder was turned off by " +
           (sel.changed_by.empty() ? std::string("dumpctl control") : sel.changed_by) +
           " (dumpctl control " + std::to_string(id_) + " --recorder on turns it back on)";
  }
  return {};
}

void DumpSession::requestTrigger(std::string reason) {
  {
    MutexLock lock(&trigger_mu_);
    trigger_reason_ = std::move(reason);
    trigger_requested_ = true;
  }
  operator_pending_.store(true, std::memory_order_release);
  if (ready_.load(std::memory_order_acquire)) drain_->ring().wakeConsumer();
}

Result<std::string> DumpSession::control(const v1::ControlChange& change,
                                         std::optional<uint32_t> uid, std::string_view reason) {
  if (!ready_.load(std::memory_order_acquire) || state_.load() != State::kActive) {
    return makeError(ErrorCode::kUnavailable, "session " + std::to_string(id_) +
                                                  " is not dumping (still starting, or ending)");
  }
  if (change.has_iteration() && drain_->plan().op_debug_mode == 4) {
    return makeError(ErrorCode::kInvalidConfig,
                     "session " + std::to_string(id_) +
                         " dumps every iteration (op_debug_mode 4): its iteration cannot change");
  }
  if (change.has_recorder_on() && change.recorder_on() && drain_->recorderExhausted()) {
    return makeError(ErrorCode::kUnavailable,
                     "session " + std::to_string(id_) + "'s flight recorder stopped after " +
                         "flight_recorder.max_triggers triggers; it cannot record again");
  }
  // Where the client's ring stands now: it is bound to apply this by its second step mark
  // past it (RingDrain enforces it there).
  const uint64_t position = drain_->ring().committedPosition();
  auto next = selection_->change(change, uid, wallClockMicros(), position, reason);
  if (!next) return next.error();
  const Selection& s = next.value();
  v1::Envelope update;
  v1::SelectionUpdate* u = update.mutable_selection_update();
  u->set_generation(s.generation);
  u->set_iteration(s.iteration);
  u->set_paused(s.paused);
  u->set_recorder_on(s.recorder_on);
  u->set_replica_every(s.replica_every);
  if (auto o = owner_.lock()) o->send(update);
  // The session thread journals it (control.jsonl): no file I/O here.
  operator_pending_.store(true, std::memory_order_release);
  drain_->ring().wakeConsumer();
  const std::string who =
      uid ? "uid " + std::to_string(*uid) : "dumpd (" + std::string(reason) + ")";
  logCommand(who + " changed the selection (generation " + std::to_string(s.generation) +
             "): iteration \"" + escapeForLog(cutUtf8(s.iteration, 256)) + "\"" +
             (s.paused ? ", paused" : "") + (s.recorder_on ? "" : ", recorder off") +
             replicaText(s));
  return "session " + std::to_string(id_) + ": iteration \"" + s.iteration + "\"" +
         (s.paused ? ", paused" : "") +
         (drain_->plan().flight_recorder ? (s.recorder_on ? ", recorder on" : ", recorder off")
                                         : "") +
         replicaText(s) + " from the client's next step";
}

void DumpSession::logCommand(const std::string& line) {
  const LogLimiter::Admission a = command_log_.admit();
  if (a.suppressed != 0) {
    spdlog::info("session {}: {} similar line(s) suppressed", id_, a.suppressed);
  }
  if (a.log) spdlog::info("session {}: {}", id_, line);
}

void DumpSession::recorderStopped() {
  v1::ControlChange off;
  off.set_recorder_on(false);
  auto done = control(off, std::nullopt, "the flight recorder stopped after max_triggers");
  if (!done) spdlog::debug("session {}: {}", id_, done.error().message);
}

void DumpSession::takeOperatorRequests() {
  // Cleared first: a request made while this runs sets it again and is taken next time.
  if (!operator_pending_.exchange(false, std::memory_order_acq_rel)) return;
  for (const std::string& line : selection_->takeJournal()) {
    drain_->appendJournal("control.jsonl", line);
  }
  std::string reason;
  bool fire = false;
  {
    MutexLock lock(&trigger_mu_);
    fire = trigger_requested_;
    trigger_requested_ = false;
    reason = std::move(trigger_reason_);
  }
  if (fire && drain_->recorder() != nullptr) drain_->recorder()->triggerManually(std::move(reason));
}

}  // namespace dumpd::daemon
