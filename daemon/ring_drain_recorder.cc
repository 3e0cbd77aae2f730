// RingDrain's flight recorder glue (docs/recorder.md): keeping records of recorded
// iterations in the ring, the NaN/infinity check, triggers, and giving ring space back.
// The policy (what is kept, when a trigger fires) is FlightRecorder's.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "base/element_count.h"
#include "base/utf8.h"
#include "daemon/clock.h"
#include "daemon/log_escape.h"
#include "daemon/ring_drain.h"
#include "storage/format/names.h"

namespace dumpd::daemon {

void findNonFinite(OpTask& task) {
  for (size_t i = 0; i < task.views.size(); ++i) {
    const storage::TensorView& v = task.views[i];
    bool nan = false, inf = false;
    if (v.sums != nullptr) {
      nan = v.sums->nan != 0;
      inf = v.sums->negative_inf != 0 || v.sums->positive_inf != 0;
    } else if (!v.data.empty() && storage::containsNonFinite(v.dtype, v.data)) {
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

void RingDrain::keepRecord(std::shared_ptr<OpTask> task, uint64_t slot, uint64_t ring_bytes) {
  // Held at once: the ring keeps its bytes, but flushes need not wait for it.
  release_.hold(slot);
  const uint32_t iteration = task->op.iteration;
  if (!task->deferred.empty()) {
    if (iteration != deferred_iteration_) deferred_iteration_bytes_ = 0;
    deferred_iteration_ = iteration;
    for (const OpTask::Deferred& d : task->deferred) {
      deferred_iteration_bytes_ += ipc::alignUp(d.size, 256);  // the client's staging alignment
    }
    largest_deferred_iteration_ = std::max(largest_deferred_iteration_, deferred_iteration_bytes_);
  }
  // The NaN/infinity check runs here, on the session thread, while the record is at hand.
  // It once ran on the writers, which run SCHED_IDLE: on a busy node they got no CPU, the
  // session thread waited for them at every step mark and training waited for ring space
  // (issue 38). A read of what the client just wrote, it costs less than the client's copy.
  if (recorder_->checksValues()) findNonFinite(*task);
  // What keeping it costs: its ring bytes and the daemon memory of its decoded descriptor.
  const uint64_t memory = keptRecordMemory(*task);
  std::vector<KeptRecord> out =
      recorder_->keep(iteration, KeptRecord{std::move(task), slot}, ring_bytes + memory, memory);
  releaseKept(std::move(out));
}

void RingDrain::offerNonFinite(OpTask& task) {
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

void RingDrain::keepRoomForProducer() {
  // Keep room for the records to come, so that the producer neither waits (block) nor drops
  // (drop) for the recorder: what the drain has read and not released (held behind the
  // oldest kept record: release is in order) leaves a whole iteration free (headroom()), and
  // when the drain falls behind (the producer's committed, unread records fill the ring),
  // kept iterations are given back before the producer runs out of room for its next
  // record.
  while (ring_.readNotReleased() + headroom() > ring_.capacity() ||
         ring_.usedBytes() + recordRoom() > ring_.capacity()) {
    std::vector<KeptRecord> freed = recorder_->discardForSpace();
    if (freed.empty()) break;
    releaseKept(std::move(freed));
  }
}

void RingDrain::releaseKept(std::vector<KeptRecord> records) {
  if (records.empty()) return;
  for (KeptRecord& r : records) {
    for (const storage::TensorView& v : r.task->views) {
      if (v.memo != nullptr) {
        storage::MemoResult m;
        m.error = "its iteration was discarded by the flight recorder";
        v.memo->publish(std::move(m));
      }
    }
    release_.markDone(r.slot);
  }
}

bool RingDrain::freeRecorderSpace(bool producer_waits) {
  if (!recorder_) return false;
  if (producer_waits && recorder_->keptBytes() != 0) {
    recorder_->countProducerWait();
    if (!recorder_->hasWarning()) {
      const auto mib = [](uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20); };
      const uint64_t need =
          recorder_->largestIterationBytes() * recorder_->plan().steps + headroom();
      const std::string why = "training waited for ring space the recorder held (" +
                              mib(recorder_->keptBytes()) + " MiB kept; the daemon fell behind " +
                              "or the ring is small); a ring_bytes of " + mib(need) +
                              " MiB would keep " + std::to_string(recorder_->plan().steps) +
                              " iterations and the room the producer needs";
      spdlog::warn("session {}: flight recorder: {}", id_, why);
      recorder_->setWarning(why);
    }
  }
  std::vector<KeptRecord> freed = recorder_->discardForSpace();
  if (freed.empty()) return false;
  releaseKept(std::move(freed));
  return true;
}

void RingDrain::checkNonFinite(uint32_t iteration) {
  const bool nan = recorder_->accepts(config::RecorderTrigger::kNan);
  const bool inf = recorder_->accepts(config::RecorderTrigger::kInf);
  const FlightRecorder::Kept::Iteration* it = recorder_->newest();
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

void RingDrain::triggerManually(std::string reason) {
  if (!recorder_ || !recorder_->accepts(config::RecorderTrigger::kManual)) return;
  TriggerEvent e;
  e.kind = config::RecorderTrigger::kManual;
  e.iteration = step_iteration_;
  e.reason = std::move(reason);
  fire(std::move(e));
}

void RingDrain::fire(TriggerEvent e) {
  if (trigger_) {
    closeTrigger("the next trigger, at iteration " + std::to_string(e.iteration) +
                 ", writes what comes of it");
  }
  e.first_nonfinite = firstNonFinite(*recorder_);
  (void)writers_nonfinite_.take();  // a closed trigger's, not this one's
  // Without a nan/inf trigger nothing checked the kept records: the writers do.
  const bool writers_check = !recorder_->checksValues();
  std::vector<FlightRecorder::Kept::Iteration> kept = recorder_->fire(e);
  kept_memos_.clear();  // all of them are written now, in order
  const config::SavedData saved = recorder_->plan().saved_data;
  // After a crash no iteration comes any more.
  const uint32_t after =
      e.kind == config::RecorderTrigger::kCrash ? 0 : recorder_->plan().after_steps;
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
  e.device_tensors_lost = fetchDeferred(deferred, through);
  const uint32_t first = kept.empty() ? e.iteration : std::min(kept.front().number, e.iteration);
  TriggerOutcome outcome(e, through);
  for (uint32_t i : recorder_->takeGivenUpForMemory()) outcome.givenUpForMemory(i);
  std::set<std::pair<uint32_t, uint32_t>> to_complete;  // (graph, iteration)
  for (FlightRecorder::Kept::Iteration& it : kept) {
    size_t written = 0;
    for (KeptRecord& r : it.items) {
      r.task->saved_data = saved;
      r.task->check_values = writers_check;
      // The step the trigger fired during completes at its own end (completeStep).
      if (it.number != e.iteration || r.task->op.graph_id != step_graph_) {
        to_complete.emplace(r.task->op.graph_id, it.number);
      }
      written += writeFetched(std::move(r.task), r.slot) ? 1 : 0;
    }
    outcome.kept(it.number, it.items.size(), written, it.whole);
  }
  trigger_.emplace(std::move(outcome));
  // Earlier iterations are complete: finish their directories once written. The one the
  // trigger fired during completes at its step's end (its later records are written too).
  release_.waitIdle();
  for (const auto& [graph, iteration] : to_complete) {
    const std::string cut = trigger_->cutShort(iteration);
    if (Status s = writer_->completeIteration(graph, iteration, 0, {}, cut); !s) {
      warnings_.warn(s.error().message);
    }
  }
  const LogLimiter::Admission a = info_log_.admit();
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

void RingDrain::closeTrigger(std::string_view why_rest) {
  const std::optional<uint32_t> started =
      have_step_ ? std::optional<uint32_t>(step_iteration_) : std::nullopt;
  TriggerEvent e = trigger_->close(started, why_rest);
  if (!e.first_nonfinite && !recorder_->checksValues()) {
    release_.waitIdle();  // the writers' findings of this trigger's records are all in
    e.first_nonfinite = writers_nonfinite_.take();
  }
  trigger_.reset();
  const LogLimiter::Admission a = info_log_.admit();
  if (a.suppressed != 0) {
    spdlog::info("session {}: {} similar line(s) suppressed", id_, a.suppressed);
  }
  if (a.log) {
    spdlog::info("session {}: flight recorder trigger at iteration {}: {}", id_, e.iteration,
                 escapeForLog(e.outcomeSummary()));
  }
  appendJournal("triggers.jsonl", e.toJsonLine(wallClockMicros(), rank_) + "\n");
}

void RingDrain::checkRecorderSizing() {
  const uint64_t iteration = recorder_->largestIterationBytes();
  if (recorder_sized_ || iteration == 0) return;
  recorder_sized_ = true;
  const uint32_t steps = recorder_->plan().steps;
  const auto mib = [](uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20); };
  std::string why;
  // The drain keeps headroom() free for the producer (keepRecord).
  if (iteration * steps + headroom() > ring_.capacity()) {
    why = "the ring (" + mib(ring_.capacity()) + " MiB) cannot hold " + std::to_string(steps) +
          " iterations of " + mib(iteration) + " MiB and the room the producer needs; raise " +
          "ring_bytes to " + mib(iteration * steps + headroom()) + " MiB";
  } else if (iteration * steps > recorder_->plan().max_bytes) {
    why = "flight_recorder.max_bytes cannot hold " + std::to_string(steps) + " iterations of " +
          mib(iteration) + " MiB";
  } else if (const uint64_t device = largest_deferred_iteration_ * steps;
             device != 0 && device > device_staging_) {
    // A quarter more: the statistics' scratch and the snapshots of the step in flight.
    why = "the device staging (" + std::to_string(device_staging_) + " bytes) cannot hold " +
          std::to_string(steps) + " iterations of " + std::to_string(largest_deferred_iteration_) +
          " bytes of CUDA tensors kept on the device; raise device_staging_bytes to " +
          std::to_string(device + device / 4);
  }
  if (why.empty()) return;
  spdlog::warn("session {}: flight recorder: {}", id_, why);
  recorder_->setWarning(why);
}

bool RingDrain::fillRecorderStatus(v1::RecorderStatus* out) const {
  if (!recorder_) return false;
  recorder_->fillStatus(out);
  return true;
}

}  // namespace dumpd::daemon
