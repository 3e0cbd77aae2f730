// RingDrain's control records: step marks (which end a step and bring in a runtime
// selection), graphs, execution orders, kernel arguments, constants, triggers and losses.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include <nlohmann/json.hpp>

#include "base/element_count.h"
#include "base/utf8.h"
#include "daemon/clock.h"
#include "daemon/log_escape.h"
#include "daemon/ring_drain.h"
#include "ipc/control_codec.h"
#include "ipc/proto_utf8.h"

namespace dumpd::daemon {
bool RingDrain::handleControl(const ipc::RingConsumer::Record& r) {
  auto view = ipc::readControl(std::span<const std::byte>(r.body, r.body_bytes));
  if (!view) return fail(view.error().message);
  v1::Control ctl;
  if (!ctl.ParseFromArray(view->message.data(), static_cast<int>(view->message.size()))) {
    const std::string field = ipc::invalidUtf8Field(ipc::WireMessage::kControl, view->message);
    if (field.empty()) return fail("control record does not parse");
    // Text the client did not make UTF-8 (an older client cut a reason inside a character):
    // the record is skipped with a warning naming the field; the session goes on.
    warnings_.warn("control record " + std::to_string(r.sequence) +
                   " is skipped: its string "
                   "field " +
                   field + " is not valid UTF-8 (protobuf strings must be)");
    release_.push(r.end, r.sequence, true);
    return true;
  }
  const std::optional<std::span<const std::byte>> payload = view->payload;
  Status st;
  switch (ctl.msg_case()) {
    case v1::Control::kStep: {
      const uint32_t g = ctl.step().graph_id();
      const uint32_t i = ctl.step().iteration();
      if (step_.started && (g != step_.graph || i != step_.iteration)) completeStep();
      // Every step mark ends what a repeat may refer to, as the client's table ends there.
      dump_once_.clear();
      // From this step on, the selection the client applied (it switched at this mark), or
      // the one it was bound to apply by now, whichever is newer.
      takeSelection(ctl.step().selection_generation(), i);
      previous_mark_end_ = r.end;
      step_ = DrainStep{true, g, i};
      graph_id_.store(g, std::memory_order_relaxed);
      iteration_.store(i, std::memory_order_relaxed);
      break;
    }
    case v1::Control::kGraph:
      st = writer_->writeGraph(ctl.graph().graph_id(), ctl.graph().ir_text(),
                               ctl.graph().pb_bytes());
      break;
    case v1::Control::kExecutionOrder: {
      std::vector<std::string> names(ctl.execution_order().op_names().begin(),
                                     ctl.execution_order().op_names().end());
      st = writer_->writeExecutionOrder(ctl.execution_order().graph_id(), names);
      break;
    }
    case v1::Control::kKernelArgs: {
      const v1::KernelArgs& k = ctl.kernel_args();
      if (plan_.save_kernel_args && filter_.deviceSelected(ids_.device) && written(k.iteration()) &&
          filter_.opSelected(k.op_name())) {
        std::vector<std::pair<std::string, std::string>> args(k.args().begin(), k.args().end());
        std::sort(args.begin(), args.end());
        st = writer_->writeKernelArgs(k.graph_id(), k.iteration(), k.op_type(), k.op_name(), args);
      }
      break;
    }
    case v1::Control::kConstant: {
      const v1::Constant& c = ctl.constant();
      std::vector<int64_t> shape(c.shape().begin(), c.shape().end());
      const bool dtype_ok = c.dtype() < 256 && dtypeValid(static_cast<uint8_t>(c.dtype()));
      const auto elements =
          dtype_ok && shape.size() <= ipc::kMaxDims ? elementCount(shape) : std::nullopt;
      const auto dtype = static_cast<DType>(c.dtype());
      if (!elements || sourceBytes(dtype, *elements) != c.data_bytes() || !payload ||
          c.data_bytes() > payload->size()) {
        return fail("constant " + c.data_id() + " has an inconsistent shape or size");
      }
      if (filter_.deviceSelected(ids_.device)) {
        storage::TensorView v;
        v.io = Io::kOutput;
        v.dtype = dtype;
        v.shape = shape;
        v.timestamp_us = c.timestamp_us();
        v.data = payload->first(c.data_bytes());
        st = writer_->writeConstant(c.graph_id(), c.data_id(), v);
        if (st) counters_.tensors_written.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    }
    case v1::Control::kTrigger:
      if (recorder_) {
        recorder_->triggerManually(
            std::string(cutUtf8(ctl.trigger().reason(), ipc::kMaxTriggerReasonBytes)));
      }
      break;
    case v1::Control::kLoss:
      if (recorder_) recorder_->onLoss(ctl.loss().iteration(), ctl.loss().value());
      break;
    case v1::Control::kReplicaMismatch:
      takeReplicaMismatch(ctl.replica_mismatch());
      break;
    case v1::Control::MSG_NOT_SET:
      return fail("empty control record");
  }
  if (!st) warnings_.warn(st.error().message);
  release_.push(r.end, r.sequence, true);
  return true;
}

void RingDrain::takeReplicaMismatch(const v1::ReplicaMismatch& m) {
  Result<TriggerEvent::Replicas> r = ReplicaReports::check(m);
  if (!r) {
    warnings_.warn(r.error().message + "; it is skipped");
    return;
  }
  replicas_.record(r.value());
  // Journalled with or without a flight recorder: the evidence that replicas diverged.
  nlohmann::json line = r.value().toJson();
  line["time_us"] = wallClockMicros();
  line["rank"] = ids_.rank;
  appendJournal("replicas.jsonl",
                line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (recorder_) recorder_->onReplicaMismatch(std::move(r.value()));
}

void RingDrain::takeSelection(uint64_t named, uint32_t from_iteration) {
  if (selection_ == nullptr) return;
  if (named < applied_generation_) {
    // Going back would undo an operator's change (a pause) at the client's word.
    warnings_.warn("the client applied selection " + std::to_string(named) + ", older than " +
                   std::to_string(applied_generation_) + " in force; it stays in force");
  } else if (named > applied_generation_) {
    std::optional<Selection> s = selection_->find(named);
    if (s) {
      applySelection(*s, from_iteration, "the client applied it");
    } else {
      // A client naming a generation the daemon never sent (or one long replaced): keep the
      // current selection.
      warnings_.warn("the client applied selection " + std::to_string(named) +
                     ", which dumpd does not know; the selection is unchanged");
    }
  }
  // The client reads its socket at every step mark: by the second one written after dumpd
  // sent a change, it has it. Enforced from here whatever it says.
  const uint64_t bound = selection_->boundBefore(previous_mark_end_);
  if (bound > applied_generation_) {
    if (std::optional<Selection> s = selection_->find(bound)) {
      warnings_.warn("the client did not apply selection " + std::to_string(bound) +
                     " by its second step after dumpd sent it; dumpd enforces it from iteration " +
                     std::to_string(from_iteration));
      applySelection(*s, from_iteration, "enforced by dumpd");
    }
  }
}

void RingDrain::enforcePause(uint32_t iteration) {
  const Selection s = selection_->current();
  if (!s.paused || s.generation <= applied_generation_) return;
  warnings_.warn(
      "the client wrote records after dumpd sent it a pause, with no step mark to "
      "apply it; dumpd enforces the pause from iteration " +
      std::to_string(iteration));
  applySelection(s, iteration, "enforced by dumpd: records came after the pause");
}

void RingDrain::applySelection(const Selection& s, uint32_t from_iteration, std::string_view how) {
  if (s.iterations) filter_.setIterations(*s.iterations);
  paused_ = s.paused;
  applied_generation_ = s.generation;
  if (recorder_) recorder_->setEnabled(s.recorder_on);
  // control.jsonl: when the change was asked (its line, queued by RuntimeSelection, goes
  // first), then from which iteration it took effect.
  for (const std::string& line : selection_->takeJournal()) appendJournal("control.jsonl", line);
  const nlohmann::json line = {{"time_us", wallClockMicros()},
                               {"generation", s.generation},
                               {"in_force_from_iteration", from_iteration},
                               {"how", how}};
  appendJournal("control.jsonl", line.dump() + "\n");
  const LogLimiter::Admission a = info_log_.admit();
  if (a.suppressed != 0) {
    spdlog::info("session {}: {} similar line(s) suppressed", ids_.session, a.suppressed);
  }
  if (!a.log) return;
  spdlog::info("session {}: selection {} in force from iteration {} ({}): iteration \"{}\"{}{}",
               ids_.session, s.generation, from_iteration, how,
               escapeForLog(cutUtf8(s.iteration, 256)), s.paused ? ", paused" : "",
               recorder_ ? (s.recorder_on ? ", recorder on" : ", recorder off") : "");
}

void RingDrain::appendJournal(std::string_view name, const std::string& line) {
  auto appended = writer_->appendJournal(name, line);
  if (!appended) {
    warnings_.warn(appended.error().message);
  } else if (!appended.value()) {
    journal_lines_refused_.fetch_add(1, std::memory_order_relaxed);
    warnings_.warn("a line of .dump_metadata/" + std::string(name) +
                   " was not written: " + writer_->journalRefusal());
  }
}

}  // namespace dumpd::daemon
