#include "daemon/drain_recorder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <set>

#include "base/element_count.h"
#include "base/utf8.h"
#include "daemon/clock.h"
#include "daemon/log_escape.h"
#include "storage/format/names.h"

namespace dumpd::daemon {

namespace {

// Whether v's bytes hold a NaN or inf: the producer's answer from its copy when it gave one
// (no second read of the bytes), else a scan here.
bool nonFiniteIn(const storage::TensorView& v) {
  switch (v.producer_scan) {
    case storage::TensorView::Scan::kFinite:
      return false;
    case storage::TensorView::Scan::kNonFinite:
      return true;
    case storage::TensorView::Scan::kUnknown:
      break;
  }
  return storage::containsNonFinite(v.dtype, v.data);
}

}  // namespace

void findNonFinite(OpTask& task) {
  for (size_t i = 0; i < task.views.size(); ++i) {
    const storage::TensorView& v = task.views[i];
    bool nan = false, inf = false;
    if (v.sums != nullptr) {
      nan = v.sums->nan != 0;
      inf = v.sums->negative_inf != 0 || v.sums->positive_inf != 0;
    } else if (!v.data.empty() && nonFiniteIn(v)) {
      // Rare: which of the two is worth a second pass.
      storage::TensorStats stats;
      const uint64_t elements = elementCount(v.shape).value_or(0);
      storage::computeStats(v.dtype, elements, v.data, storage::StatOptions{}, stats);
      nan = stats.nan != 0;
      inf = stats.negative_inf != 0 || stats.positive_inf != 0;
    }
    if (nan && task.nan_view == OpTask::kNoView) task.nan_view = static_cast<uint32_t>(i);
    if (inf && task.inf_view == OpTask::kNoView) task.inf_view = static_cast<uint32_t>(i);
    if (task.nan_view != OpTask::kNoView && task.inf_view != OpTask::kNoView) return;
  }
}

namespace {

// The first kept record, oldest iteration first, holding a NaN or an infinity (each was
// checked when it was kept).
std::optional<TriggerEvent::NonFinite> firstNonFinite(const FlightRecorder& recorder) {
  if (!recorder.checksValues()) return std::nullopt;
  std::optional<TriggerEvent::NonFinite> found;
  recorder.forEachKept([&](uint32_t iteration, const KeptRecord& r) {
    const OpTask& t = *r.task;
    const uint32_t at = std::min(t.nan_view, t.inf_view);
    if (at == OpTask::kNoView) return true;
    const storage::TensorView& v = t.views[at];
    found = TriggerEvent::NonFinite{
        iteration, std::string(t.op.opName()),
        std::string(storage::ioName(v.io)) + " " + std::to_string(v.slot), at == t.nan_view};
    return false;
  });
  return found;
}

}  // namespace

uint64_t keptRecordMemory(const OpTask& task) {
  // The task with its shared_ptr control block, the kept record and its release slot, what
  // the decoded op holds (names, dims, tensors), and per view its TensorView, statistics and
  // memo, with allocator overhead (checked with RSS in tests/integration/
  // test_hostile_recorder.py). Capacities: the client chooses the names' lengths.
  constexpr uint64_t kOverhead = 16;  // per heap block
  const ipc::DecodedOp& op = task.op;
  return sizeof(OpTask) + sizeof(KeptRecord) + 256 + op.strings.capacity() + kOverhead +
         op.dims.capacity() * sizeof(int64_t) + kOverhead +
         op.tensors.capacity() * sizeof(ipc::DecodedTensor) + kOverhead +
         task.views.capacity() * sizeof(storage::TensorView) + kOverhead +
         task.sums.capacity() * sizeof(storage::StatSums) + kOverhead +
         task.memos.size() * (sizeof(storage::TensorMemo) + 2 * kOverhead + 64) +
         task.deferred.capacity() * sizeof(OpTask::Deferred) + kOverhead;
}

DrainRecorder::DrainRecorder(uint64_t session_id, uint32_t rank, config::FlightRecorderPlan plan,
                             Settings settings, Drain drain)
    : id_(session_id),
      rank_(rank),
      memory_(std::move(settings.memory)),
      recorder_(std::move(plan)),
      drain_(drain),
      device_(session_id, std::move(settings.device), drain.ring, drain.release, drain.counters,
              drain.warnings),
      on_stopped_(std::move(settings.on_stopped)) {
  if (memory_) recorder_.setMemoryBudget(memory_.get());
}

void DrainRecorder::keep(std::shared_ptr<OpTask> task, uint64_t slot, uint64_t ring_bytes) {
  // Held at once: the ring keeps its bytes, but flushes need not wait for it.
  drain_.release.hold(slot);
  device_.noteKept(*task);
  // The NaN/infinity check runs here, on the session thread, while the record is at hand.
  // It once ran on the writers, which run SCHED_IDLE: on a busy node they got no CPU, the
  // session thread waited for them at every step mark and training waited for ring space
  // (issue 38). A read of what the client just wrote, it costs less than the client's copy.
  if (recorder_.checksValues()) findNonFinite(*task);
  // What keeping it costs: its ring bytes and the daemon memory of its decoded descriptor.
  const uint32_t iteration = task->op.iteration;
  const uint64_t memory = keptRecordMemory(*task);
  std::vector<KeptRecord> out =
      recorder_.keep(iteration, KeptRecord{std::move(task), slot}, ring_bytes + memory, memory);
  releaseKept(std::move(out));
}

void DrainRecorder::writeAfterTrigger(std::shared_ptr<OpTask> task, uint64_t slot) {
  const uint32_t iteration = task->op.iteration;
  task->saved_data = recorder_.plan().saved_data;
  task->check_values = trigger_.has_value() && !recorder_.checksValues();
  if (task->deferred.empty()) {
    drain_.output.write(std::move(task), slot);
    wrote(iteration);
    return;
  }
  // Its bytes come from the client's device first.
  fetch({task.get()}, recorder_.windowLast());
  drain_.release.hold(slot);
  if (writeHeld(std::move(task), slot)) {
    wrote(iteration);
  } else if (trigger_ && trigger_->covers(iteration)) {
    trigger_->lost(iteration);
  }
}

bool DrainRecorder::writeHeld(std::shared_ptr<OpTask> task, uint64_t slot) {
  if (device_.holdAbandoned(task, slot)) return false;
  if (task->views.empty()) {
    drain_.release.markDone(slot);
    return false;
  }
  drain_.release.write(slot);
  drain_.output.write(std::move(task), slot);
  return true;
}

void DrainRecorder::offerNonFinite(OpTask& task) {
  if (!writers_nonfinite_.couldBeFirst(task.sequence)) return;  // a read of its bytes saved
  findNonFinite(task);
  const uint32_t at = std::min(task.nan_view, task.inf_view);
  if (at == OpTask::kNoView) return;
  const storage::TensorView& v = task.views[at];
  writers_nonfinite_.offer(
      task.sequence,
      TriggerEvent::NonFinite{task.op.iteration, std::string(task.op.opName()),
                              std::string(storage::ioName(v.io)) + " " + std::to_string(v.slot),
                              at == task.nan_view});
}

void DrainRecorder::keepRoom() {
  // Keep room for the records to come, so that the producer neither waits (block) nor drops
  // (drop) for the recorder: what the drain has read and not released (held behind the
  // oldest kept record: release is in order) leaves a whole iteration free (headroom()), and
  // when the drain falls behind (the producer's committed, unread records fill the ring),
  // kept iterations are given back before the producer runs out of room for its next
  // record.
  const ipc::RingConsumer& ring = drain_.ring;
  while (ring.readNotReleased() + headroom() > ring.capacity() ||
         ring.usedBytes() + recordRoom() > ring.capacity()) {
    std::vector<KeptRecord> freed = recorder_.discardForSpace();
    if (freed.empty()) break;
    releaseKept(std::move(freed));
  }
}

void DrainRecorder::releaseKept(std::vector<KeptRecord> records) {
  for (KeptRecord& r : records) {
    for (const storage::TensorView& v : r.task->views) {
      if (v.memo != nullptr) {
        storage::MemoResult m;
        m.error = "its iteration was discarded by the flight recorder";
        v.memo->publish(std::move(m));
      }
    }
    drain_.release.markDone(r.slot);
  }
}

bool DrainRecorder::freeSpace(bool producer_waits) {
  if (producer_waits && recorder_.keptBytes() != 0) {
    recorder_.countProducerWait();
    if (!recorder_.hasWarning()) {
      const auto mib = [](uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20); };
      const uint64_t need = recorder_.largestIterationBytes() * recorder_.plan().steps + headroom();
      const std::string why = "training waited for ring space the recorder held (" +
                              mib(recorder_.keptBytes()) + " MiB kept; the daemon fell behind " +
                              "or the ring is small); a ring_bytes of " + mib(need) +
                              " MiB would keep " + std::to_string(recorder_.plan().steps) +
                              " iterations and the room the producer needs";
      spdlog::warn("session {}: flight recorder: {}", id_, why);
      recorder_.setWarning(why);
    }
  }
  std::vector<KeptRecord> freed = recorder_.discardForSpace();
  if (freed.empty()) return false;
  releaseKept(std::move(freed));
  return true;
}

void DrainRecorder::setEnabled(bool on) {
  recorder_.setEnabled(on);
  if (!on) releaseKept(recorder_.releaseAll());
}

void DrainRecorder::stepEnds(uint32_t iteration) {
  releaseAnswered();
  checkNonFinite(iteration);
  checkSizing();
}

std::string DrainRecorder::cutShort(uint32_t iteration) const {
  return trigger_ ? trigger_->cutShort(iteration) : std::string();
}

void DrainRecorder::stepCompleted(uint32_t iteration) {
  if (trigger_) {
    trigger_->stepDone(iteration);
    if (iteration >= trigger_->last()) closeTrigger("");
  }
  // Once the last trigger's iterations are written, the client stops copying what nobody
  // records any more.
  if (recorder_.exhausted() && !recorder_.writesAfter(iteration) && !stop_told_ && on_stopped_) {
    stop_told_ = true;
    on_stopped_();
  }
}

void DrainRecorder::sessionEnds(bool producer_lost) {
  checkNonFinite(drain_.step.iteration);
  if (producer_lost && recorder_.accepts(config::RecorderTrigger::kCrash) &&
      recorder_.keptIterations() != 0) {
    TriggerEvent e;
    e.kind = config::RecorderTrigger::kCrash;
    e.iteration = drain_.step.iteration;
    e.reason = "the client went away without closing the session";
    fire(std::move(e));
  }
}

void DrainRecorder::close(std::string_view why_rest) {
  if (trigger_) closeTrigger(why_rest);
  releaseKept(recorder_.releaseAll());
  // Records whose device tensors the client never sent: the ring goes away with the session.
  releaseAnswered(/*all=*/true);
}

void DrainRecorder::checkNonFinite(uint32_t iteration) {
  const bool nan = recorder_.accepts(config::RecorderTrigger::kNan);
  const bool inf = recorder_.accepts(config::RecorderTrigger::kInf);
  const FlightRecorder::Kept::Iteration* it = recorder_.newest();
  if ((!nan && !inf) || it == nullptr || it->number != iteration) return;
  // Every kept record was checked when it was kept; items are in record order.
  for (const KeptRecord& r : it->items) {
    const OpTask& t = *r.task;
    // The first view holding a value of a kind this recorder triggers on.
    const uint32_t nan_at = nan ? t.nan_view : OpTask::kNoView;
    const uint32_t inf_at = inf ? t.inf_view : OpTask::kNoView;
    const uint32_t at = std::min(nan_at, inf_at);
    if (at == OpTask::kNoView) continue;
    const storage::TensorView& v = t.views[at];
    TriggerEvent e;
    e.kind = at == nan_at ? config::RecorderTrigger::kNan : config::RecorderTrigger::kInf;
    e.iteration = it->number;
    e.op_name = std::string(t.op.opName());
    e.tensor = std::string(storage::ioName(v.io)) + " " + std::to_string(v.slot);
    e.reason = std::string(e.kind == config::RecorderTrigger::kNan ? "NaN" : "an infinity") +
               " in " + e.op_name + " " + e.tensor;
    fire(std::move(e));
    return;
  }
}

void DrainRecorder::triggerManually(std::string reason) {
  if (!recorder_.accepts(config::RecorderTrigger::kManual)) return;
  TriggerEvent e;
  e.kind = config::RecorderTrigger::kManual;
  e.iteration = drain_.step.iteration;
  e.reason = std::move(reason);
  fire(std::move(e));
}

void DrainRecorder::onLoss(uint32_t iteration, double value) {
  if (!recorder_.accepts(config::RecorderTrigger::kLossSpike)) return;
  if (std::optional<TriggerEvent> e = recorder_.onLoss(iteration, value)) {
    e->iteration = drain_.step.iteration;
    fire(std::move(*e));
  }
}

void DrainRecorder::onReplicaMismatch(TriggerEvent::Replicas r) {
  if (!recorder_.accepts(config::RecorderTrigger::kReplicaMismatch)) return;
  TriggerEvent e;
  e.kind = config::RecorderTrigger::kReplicaMismatch;
  e.iteration = drain_.step.iteration;
  e.reason = r.text();
  e.replicas = std::move(r);
  fire(std::move(e));
}

void DrainRecorder::fire(TriggerEvent e) {
  if (trigger_) {
    closeTrigger("the next trigger, at iteration " + std::to_string(e.iteration) +
                 ", writes what comes of it");
  }
  e.first_nonfinite = firstNonFinite(recorder_);
  (void)writers_nonfinite_.take();  // a closed trigger's, not this one's
  // Without a nan/inf trigger nothing checked the kept records: the writers do.
  const bool writers_check = !recorder_.checksValues();
  std::vector<FlightRecorder::Kept::Iteration> kept = recorder_.fire(e);
  drain_.dump_once.keptWritten();  // all of them are written now, in order
  const config::SavedData saved = recorder_.plan().saved_data;
  // After a crash no iteration comes any more.
  const uint32_t after =
      e.kind == config::RecorderTrigger::kCrash ? 0 : recorder_.plan().after_steps;
  // Tensors the client kept on its device come over first (after a crash they are lost);
  // records of the iterations up to the last one written are sent whole from now on.
  std::vector<OpTask*> deferred;
  for (FlightRecorder::Kept::Iteration& it : kept) {
    for (KeptRecord& r : it.items) {
      if (!r.task->deferred.empty()) deferred.push_back(r.task.get());
    }
  }
  const auto through =
      static_cast<uint32_t>(std::min<uint64_t>(uint64_t{e.iteration} + after, UINT32_MAX));
  e.device_tensors_lost = fetch(deferred, through);
  const uint32_t first = kept.empty() ? e.iteration : std::min(kept.front().number, e.iteration);
  TriggerOutcome outcome(e, through);
  for (uint32_t i : recorder_.takeGivenUpForMemory()) outcome.givenUpForMemory(i);
  std::set<std::pair<uint32_t, uint32_t>> to_complete;  // (graph, iteration)
  for (FlightRecorder::Kept::Iteration& it : kept) {
    size_t written = 0;
    for (KeptRecord& r : it.items) {
      r.task->saved_data = saved;
      r.task->check_values = writers_check;
      // The step the trigger fired during completes at its own end (completeStep).
      if (it.number != e.iteration || r.task->op.graph_id != drain_.step.graph) {
        to_complete.emplace(r.task->op.graph_id, it.number);
      }
      written += writeHeld(std::move(r.task), r.slot) ? 1 : 0;
    }
    outcome.kept(it.number, it.items.size(), written, it.whole);
  }
  trigger_.emplace(std::move(outcome));
  // Earlier iterations are complete: finish their directories once written. The one the
  // trigger fired during completes at its step's end (its later records are written too).
  drain_.release.waitIdle();
  for (const auto& [graph, iteration] : to_complete) {
    drain_.output.completeIteration(graph, iteration, trigger_->cutShort(iteration));
  }
  const LogLimiter::Admission a = drain_.info_log.admit();
  if (a.suppressed != 0) {
    spdlog::info("session {}: {} similar line(s) suppressed", id_, a.suppressed);
  }
  if (a.log) {
    spdlog::info(
        "session {}: flight recorder trigger: {}; writing what it keeps of iterations "
        "{}-{} and iterations up to {} as they come",
        id_, escapeForLog(cutUtf8(e.summary(), 1024)), first, e.iteration, through);
  }
}

void DrainRecorder::closeTrigger(std::string_view why_rest) {
  const std::optional<uint32_t> started =
      drain_.step.started ? std::optional<uint32_t>(drain_.step.iteration) : std::nullopt;
  TriggerEvent e = trigger_->close(started, why_rest);
  if (!e.first_nonfinite && !recorder_.checksValues()) {
    drain_.release.waitIdle();  // the writers' findings of this trigger's records are all in
    e.first_nonfinite = writers_nonfinite_.take();
  }
  trigger_.reset();
  const LogLimiter::Admission a = drain_.info_log.admit();
  if (a.suppressed != 0) {
    spdlog::info("session {}: {} similar line(s) suppressed", id_, a.suppressed);
  }
  if (a.log) {
    spdlog::info("session {}: flight recorder trigger at iteration {}: {}", id_, e.iteration,
                 escapeForLog(e.outcomeSummary()));
  }
  drain_.output.journalTrigger(e.toJsonLine(wallClockMicros(), rank_) + "\n");
}

void DrainRecorder::checkSizing() {
  const uint64_t iteration = recorder_.largestIterationBytes();
  if (sized_ || iteration == 0) return;
  sized_ = true;
  const uint32_t steps = recorder_.plan().steps;
  const auto mib = [](uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20); };
  std::string why;
  // keepRoom() keeps headroom() free for the producer.
  if (iteration * steps + headroom() > drain_.ring.capacity()) {
    why = "the ring (" + mib(drain_.ring.capacity()) + " MiB) cannot hold " +
          std::to_string(steps) + " iterations of " + mib(iteration) +
          " MiB and the room the producer needs; raise " + "ring_bytes to " +
          mib(iteration * steps + headroom()) + " MiB";
  } else if (iteration * steps > recorder_.plan().max_bytes) {
    why = "flight_recorder.max_bytes cannot hold " + std::to_string(steps) + " iterations of " +
          mib(iteration) + " MiB";
  } else if (const uint64_t device = device_.largestIterationBytes() * steps;
             device != 0 && device > device_.stagingBytes()) {
    // A quarter more: the statistics' scratch and the snapshots of the step in flight.
    why = "the device staging (" + std::to_string(device_.stagingBytes()) + " bytes) cannot hold " +
          std::to_string(steps) + " iterations of " +
          std::to_string(device_.largestIterationBytes()) +
          " bytes of CUDA tensors kept on the device; raise device_staging_bytes to " +
          std::to_string(device + device / 4);
  }
  if (why.empty()) return;
  spdlog::warn("session {}: flight recorder: {}", id_, why);
  recorder_.setWarning(why);
}

}  // namespace dumpd::daemon
