#include "daemon/ring_drain.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "base/element_count.h"
#include "daemon/log_escape.h"
#include "ipc/op_codec.h"

namespace dumpd::daemon {
namespace {

uint64_t memoKey(uint64_t sequence, uint32_t tensor) {
  return sequence * ipc::kMaxTensorsPerRecord + tensor;
}

storage::StatSums sumsFromWire(const ipc::StatsPayload& p) {
  storage::StatSums s;
  s.count = p.count;
  s.max = p.max;
  s.min = p.min;
  s.sum = p.sum;
  s.sum_squares = p.sum_squares;
  s.negative = p.negative;
  s.positive = p.positive;
  s.zero = p.zero;
  s.nan = p.nan;
  s.negative_inf = p.negative_inf;
  s.positive_inf = p.positive_inf;
  return s;
}

// A client-written counter, capped so that summing it into daemon-wide totals cannot wrap.
constexpr uint64_t kMaxClientCount = uint64_t{1} << 48;

}  // namespace

RingDrain::RingDrain(uint64_t session_id, uint32_t rank, uint32_t device, config::DumpPlan plan,
                     config::Filter filter, ipc::RingConsumer ring,
                     std::shared_ptr<storage::FileSystem> fs,
                     std::unique_ptr<storage::JobWriter> writer, storage::WriterPool& pool,
                     std::function<void(uint64_t)> on_done)
    : id_(session_id),
      rank_(rank),
      device_(device),
      plan_(std::move(plan)),
      filter_(std::move(filter)),
      ring_(std::move(ring)),
      fs_(std::move(fs)),
      writer_(std::move(writer)),
      pool_(pool),
      release_(ring_, std::move(on_done)),
      warnings_(session_id) {
  iteration_.store(plan_.initial_iteration, std::memory_order_relaxed);
  snapshot_.store(std::make_shared<const WriterSnapshot>());
  if (plan_.flight_recorder) recorder_ = std::make_unique<FlightRecorder>(*plan_.flight_recorder);
}

void RingDrain::setRecorderMemory(std::shared_ptr<ByteBudget> budget) {
  recorder_memory_ = std::move(budget);
  if (recorder_) recorder_->setMemoryBudget(recorder_memory_.get());
}

std::optional<uint64_t> RingDrain::writerFreeBytes() {
  auto f = fs_->freeBytes();
  if (!f) return std::nullopt;
  return f.value();
}

uint64_t RingDrain::clientDroppedTensors() const {
  return std::min(ring_.droppedTensors(), kMaxClientCount);
}

uint64_t RingDrain::takeClientDropped() {
  // The client may lower its counter as well as raise it: count only increases.
  const uint64_t now = clientDroppedTensors();
  const uint64_t delta = now > client_dropped_reported_ ? now - client_dropped_reported_ : 0;
  client_dropped_reported_ = std::max(client_dropped_reported_, now);
  return delta;
}

bool RingDrain::fail(std::string message) {
  error_ = std::move(message);
  return false;
}

bool RingDrain::handle(const ipc::RingConsumer::Record& r) {
  if (!dispatch(r)) return false;
  // After every record, a step mark or a loss too: the producer may have used the room.
  if (recorderHoldsSpace()) keepRoomForProducer();
  return true;
}

bool RingDrain::dispatch(const ipc::RingConsumer::Record& r) {
  switch (r.kind) {
    case ipc::RecordKind::kPad:
      release_.push(r.end, 0, true);
      return true;
    case ipc::RecordKind::kOp:
      counters_.records.fetch_add(1, std::memory_order_relaxed);
      return handleOp(r);
    case ipc::RecordKind::kControl:
      counters_.records.fetch_add(1, std::memory_order_relaxed);
      return handleControl(r);
    case ipc::RecordKind::kVoid: {
      // The client reserved this record but could not fill it (a device copy failed).
      uint32_t lost = 0;
      if (r.body_bytes >= 4) std::memcpy(&lost, r.body, 4);
      counters_.records.fetch_add(1, std::memory_order_relaxed);
      counters_.tensors_received.fetch_add(lost, std::memory_order_relaxed);
      counters_.tensors_failed.fetch_add(lost, std::memory_order_relaxed);
      warnings_.warn("the client could not fill a record (a device copy failed)");
      release_.push(r.end, r.sequence, true);
      return true;
    }
  }
  return fail("record of unknown kind");
}

bool RingDrain::handleOp(const ipc::RingConsumer::Record& r) {
  auto task = std::make_shared<OpTask>();
  if (Status s = ipc::decodeOp(r.body, r.body_bytes, task->op); !s) return fail(s.error().message);
  const ipc::DecodedOp& op = task->op;
  counters_.tensors_received.fetch_add(op.tensors.size(), std::memory_order_relaxed);
  graph_id_.store(op.graph_id, std::memory_order_relaxed);
  iteration_.store(op.iteration, std::memory_order_relaxed);
  if (!have_step_) {
    have_step_ = true;
    step_graph_ = op.graph_id;
    step_iteration_ = op.iteration;
  }
  // A pause is enforced without a step mark too: from the first record written after dumpd
  // sent it that belongs to another iteration than the step in progress (a client that moves
  // on without step marks would otherwise dump on while paused). The step in progress keeps
  // the grace a step mark gets (the client may not have read the pause yet), so a job's
  // iteration is not cut in two.
  if (!paused_ && selection_ != nullptr &&
      (op.iteration != step_iteration_ || op.graph_id != step_graph_) &&
      r.end - ipc::recordLength(r.body_bytes) >= selection_->pausedFrom()) {
    enforcePause(op.iteration);
  }
  const bool marked = (op.flags & ipc::kOpMarked) != 0;
  // Selected iterations are written as the job says; with a flight recorder, the iterations
  // after a trigger are written with its saved_data, and every other one is kept.
  const bool dumped = selected(op.iteration);
  const bool recorder_writes = !dumped && recorder_ && recorder_->writes(op.iteration);
  const bool kept = !dumped && !recorder_writes && recorder_ && recorder_->recording();
  const bool op_selected = filter_.deviceSelected(device_) && (dumped || recorder_writes || kept) &&
                           filter_.opSelected(op.opName(), marked);
  uint64_t bytes = 0;
  for (const ipc::DecodedTensor& t : op.tensors) {
    if (!dtypeValid(t.dtype)) {
      return fail("record " + std::to_string(r.sequence) + " has unknown dtype " +
                  std::to_string(t.dtype));
    }
    const auto dtype = static_cast<DType>(t.dtype);
    const auto elements = elementCount(op.shape(t));
    const bool sums = t.payload == ipc::PayloadKind::kStatistics;
    const bool repeat = t.payload == ipc::PayloadKind::kSame;
    const bool deferred = t.payload == ipc::PayloadKind::kDeferred;
    if (repeat && plan_.overflowDump()) {
      return fail("record " + std::to_string(r.sequence) + ": a tensor of " +
                  std::string(op.opName()) +
                  " repeats an earlier one, but overflow mode needs every tensor's bytes");
    }
    if (sums && (!plan_.statisticsFromSums() || !storage::hasStatistics(dtype))) {
      return fail("record " + std::to_string(r.sequence) + ": a tensor of " +
                  std::string(op.opName()) +
                  " carries device statistics, but the job needs its bytes (saved_data, "
                  "statistic_category or dtype)");
    }
    if (deferred && (!recorder_ || dumped)) {
      // Only a recorded iteration's tensors may stay on the device: anything else would hold
      // the ring until a fetch that nothing asks for times out.
      return fail("record " + std::to_string(r.sequence) + ": a tensor of " +
                  std::string(op.opName()) + " is kept on the client's device, but " +
                  (recorder_
                       ? "iteration " + std::to_string(op.iteration) + " is dumped, not recorded"
                       : std::string("the job has no flight recorder")));
    }
    if (deferred && !deferredPayloadValid(r.sequence, op, t, dtype, elements)) return false;
    if (!elements ||
        (!sums && !repeat && !deferred && sourceBytes(dtype, *elements) != t.data_bytes)) {
      return fail("record " + std::to_string(r.sequence) + ": a tensor of " +
                  std::string(op.opName()) + " has " + std::to_string(t.data_bytes) +
                  " bytes, which does not match its shape and dtype");
    }
    // Payloads are copied once out of shared memory and that copy is checked and used: the
    // client may change the ring meanwhile.
    ipc::StatsPayload stats{};
    if (sums || deferred) {
      std::memcpy(&stats, t.data, sizeof stats);
      if (std::string why = ipc::statsPayloadProblem(stats, *elements); !why.empty()) {
        return fail("record " + std::to_string(r.sequence) + ": the device statistics of a " +
                    "tensor of " + std::string(op.opName()) + " are corrupt: the payload " + why);
      }
    }
    ipc::SamePayload same{};
    if (repeat) {
      std::memcpy(&same, t.data, sizeof same);
      if (same.reserved != 0) {
        return fail("record " + std::to_string(r.sequence) + ": a repeated tensor of " +
                    std::string(op.opName()) + " is corrupt: its payload has a non-zero " +
                    "reserved field");
      }
    }
    const auto io = static_cast<Io>(t.io);
    if (!op_selected || !filter_.ioSelected(io)) {
      counters_.tensors_filtered.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    storage::TensorView v;
    v.io = io;
    v.slot = t.slot;
    v.dtype = dtype;
    v.shape = op.shape(t);
    v.format = op.format(t);
    v.timestamp_us = t.timestamp_us;
    if (repeat) {
      std::shared_ptr<storage::TensorMemo> source = repeatedTensor(r.sequence, op, t, same, kept);
      if (source == nullptr) continue;  // counted as failed, with a warning
      v.same_as = source.get();
      task->memos.push_back(std::move(source));
    } else if (sums || deferred) {
      if (task->sums.empty()) task->sums.reserve(op.tensors.size());
      task->sums.push_back(sumsFromWire(stats));
      v.sums = &task->sums.back();
      if (deferred) {
        task->deferred.push_back(
            {static_cast<uint32_t>(task->views.size()), t.data + ipc::kDeferredHeaderBytes,
             t.data_bytes - ipc::kDeferredHeaderBytes,
             reinterpret_cast<const uint64_t*>(t.data + offsetof(ipc::DeferredPayload, state))});
      }
    } else {
      v.data = std::span<const std::byte>(t.data, t.data_bytes);
    }
    if (t.memo && *elements != 0 && memos_.size() < ipc::kMaxMemoTensorsPerStep) {
      const auto index = static_cast<uint32_t>(&t - op.tensors.data());
      auto memo = std::make_shared<storage::TensorMemo>(
          op.graph_id, op.iteration, dtype, std::vector<int64_t>(v.shape.begin(), v.shape.end()));
      memos_.emplace(memoKey(r.sequence, index), memo);
      if (kept) kept_memos_.insert(memo.get());
      v.memo = memo.get();
      task->memos.push_back(std::move(memo));
    }
    task->views.push_back(v);
    bytes += t.data_bytes;
  }
  if (task->views.empty()) {
    release_.push(r.end, r.sequence, true);
    return true;
  }
  task->bytes = bytes;
  task->sequence = r.sequence;
  largest_record_ = std::max<uint64_t>(largest_record_, r.body_bytes);
  const uint64_t slot = release_.push(r.end, r.sequence, false);
  if (kept) {
    keepRecord(std::move(task), slot, ipc::recordLength(r.body_bytes));
    return true;
  }
  if (recorder_writes) {
    task->saved_data = recorder_->plan().saved_data;
    task->check_values = trigger_.has_value() && !recorder_->checksValues();
  }
  const uint32_t iteration = op.iteration;
  if (!task->deferred.empty()) {
    // Written now (after a trigger): its bytes come from the client's device first.
    fetchDeferred({task.get()}, recorder_writes ? recorder_->windowLast() : iteration);
    release_.hold(slot);
    if (writeFetched(std::move(task), slot)) {
      noteWritten(iteration);
    } else if (trigger_ && trigger_->covers(iteration)) {
      trigger_->lost(iteration);
    }
    return true;
  }
  submitWrite(std::move(task), slot);
  noteWritten(iteration);
  return true;
}

void RingDrain::submitWrite(std::shared_ptr<OpTask> task, uint64_t slot) {
  // Taken here, in record order: statistic.csv rows follow the producer's order of ops
  // whichever writer thread finishes first.
  const uint64_t row_ticket = writer_->takeRowTicket(task->saved_data);
  const uint64_t bytes = task->bytes;
  // Blocks while the pool's byte budget, or this session's share of it, is used: the ring
  // then fills and the producer waits or drops, so the daemon's memory stays bounded. The
  // pool serves sessions in turn: this session's backlog never queues ahead of another's.
  pool_.submit(id_, bytes + 4096, [self = shared_from_this(), task, slot, row_ticket] {
    storage::OpRecord rec;
    rec.graph_id = task->op.graph_id;
    rec.iteration = task->op.iteration;
    rec.op_type = task->op.opType();
    rec.op_name = task->op.opName();
    rec.task_id = task->op.task_id;
    rec.stream_id = task->op.stream_id;
    rec.tensors = task->views;
    rec.row_ticket = row_ticket;
    rec.saved_data = task->saved_data;
    if (task->check_values) self->offerNonFinite(*task);
    storage::OpOutcome partial;
    auto out = self->writer_->writeOp(rec, &partial);
    const storage::OpOutcome& done = out ? out.value() : partial;
    DrainCounters& c = self->counters_;
    c.tensors_written.fetch_add(done.tensors_written, std::memory_order_relaxed);
    c.tensors_dropped.fetch_add(done.tensors_dropped, std::memory_order_relaxed);
    c.bytes_written.fetch_add(done.bytes_written, std::memory_order_relaxed);
    c.tensors_linked.fetch_add(done.tensors_linked, std::memory_order_relaxed);
    c.tensors_skipped.fetch_add(done.tensors_skipped, std::memory_order_relaxed);
    if (!out) {
      // The failing tensor and every one after it in this record (and repeats before it
      // that failed alone).
      c.tensors_failed.fetch_add(
          task->views.size() - done.tensors_written - done.tensors_dropped - done.tensors_skipped,
          std::memory_order_relaxed);
      self->warnings_.warn(out.error().message);
    } else if (done.tensors_failed != 0) {
      c.tensors_failed.fetch_add(done.tensors_failed, std::memory_order_relaxed);
      self->warnings_.warn(done.failure);
    }
    self->release_.markDone(slot);
  });
}

uint64_t RingDrain::sameKey(const ipc::SamePayload& same) {
  if (same.tensor >= ipc::kMaxTensorsPerRecord ||
      same.sequence >= UINT64_MAX / ipc::kMaxTensorsPerRecord) {
    return 0;  // memoKey would wrap; no such record exists
  }
  return memoKey(same.sequence, same.tensor);
}

std::shared_ptr<storage::TensorMemo> RingDrain::repeatedTensor(uint64_t sequence,
                                                               const ipc::DecodedOp& op,
                                                               const ipc::DecodedTensor& t,
                                                               const ipc::SamePayload& same,
                                                               bool kept) {
  auto it = memos_.find(sameKey(same));
  std::shared_ptr<storage::TensorMemo> m = it == memos_.end() ? nullptr : it->second;
  if (m != nullptr && !kept && kept_memos_.contains(m.get()) && !m->published()) {
    // Its source waits in the ring for a trigger: a writer would wait for it without end.
    counters_.tensors_failed.fetch_add(1, std::memory_order_relaxed);
    warnings_.warn("record " + std::to_string(sequence) + ": a tensor of " +
                   std::string(op.opName()) +
                   " repeats a tensor the flight recorder keeps unwritten; it is not written");
    return nullptr;
  }
  const auto shape = op.shape(t);
  if (m != nullptr && m->graphId() == op.graph_id && m->iteration() == op.iteration &&
      m->dtype() == static_cast<DType>(t.dtype) &&
      std::equal(shape.begin(), shape.end(), m->shape().begin(), m->shape().end())) {
    return m;
  }
  counters_.tensors_failed.fetch_add(1, std::memory_order_relaxed);
  warnings_.warn("record " + std::to_string(sequence) + ": a tensor of " +
                 std::string(op.opName()) +
                 (m == nullptr ? " repeats a tensor this step did not dump (lost, or over the "
                                 "limit of remembered tensors)"
                               : " repeats a tensor of another step, dtype or shape") +
                 "; it is not written");
  return nullptr;
}

void RingDrain::completeStep() {
  memos_.clear();  // a new step repeats nothing of the last one
  kept_memos_.clear();
  release_.waitIdle();
  if (recorder_) {
    releaseAnswered();
    checkNonFinite(step_iteration_);
    checkRecorderSizing();
  }
  publishSnapshot();
  const bool dumped =
      selected(step_iteration_) || (recorder_ && recorder_->writes(step_iteration_));
  if (dumped) {
    const std::string cut = trigger_ ? trigger_->cutShort(step_iteration_) : std::string();
    Status s =
        writer_->completeIteration(step_graph_, step_iteration_, takeClientDropped(), {}, cut);
    if (!s) warnings_.warn(s.error().message);
  }
  if (dumped || writer_->listsEveryIteration()) {
    Status s = writer_->appendGlobalExecutionOrder(step_graph_, step_iteration_);
    if (!s) warnings_.warn(s.error().message);
  }
  if (trigger_) {
    trigger_->stepDone(step_iteration_);
    if (step_iteration_ >= trigger_->last()) closeTrigger("");
  }
  // Once the last trigger's iterations are written, the client stops copying what nobody
  // records any more.
  if (recorder_ && recorder_->exhausted() && !recorder_->writesAfter(step_iteration_) &&
      !recorder_stop_told_ && on_recorder_stopped_) {
    recorder_stop_told_ = true;
    on_recorder_stopped_();
  }
}

void RingDrain::publishSnapshot() {
  auto snap = std::make_shared<WriterSnapshot>();
  const std::vector<std::string> unused = filter_.unusedKernels();
  snap->unused_kernels_total = static_cast<uint32_t>(unused.size());
  for (size_t i = 0; i < unused.size() && i < kMaxListedKernels; ++i) {
    snap->unused_kernels.push_back(unused[i].substr(0, 1024));
  }
  const storage::JobCounters jc = writer_->counters();
  snap->stop_reason = jc.stop_reason;
  write_errors_.store(jc.write_errors, std::memory_order_relaxed);
  open_dirs_.store(static_cast<uint32_t>(jc.open_directories), std::memory_order_relaxed);
  snapshot_.store(std::move(snap));
}

void RingDrain::finish(SessionEnd end) {
  const bool producer_lost = end == SessionEnd::kProducerLost;
  const bool may_fire = end != SessionEnd::kShutdown;
  release_.waitIdle();
  if (recorder_ && may_fire) {
    checkNonFinite(step_iteration_);
    if (producer_lost && recorder_->accepts(config::RecorderTrigger::kCrash) &&
        recorder_->keptIterations() != 0) {
      TriggerEvent e;
      e.kind = config::RecorderTrigger::kCrash;
      e.iteration = step_iteration_;
      e.reason = "the client went away without closing the session";
      fire(std::move(e));
    }
  }
  // The iteration in progress: the job finished it only if it closed its session.
  std::string cut = producer_lost ? "the job went away during this iteration"
                    : may_fire    ? std::string()
                                  : "dumpd stopped during this iteration";
  if (trigger_ && cut.empty()) cut = trigger_->cutShort(step_iteration_);
  if (trigger_) {
    closeTrigger(producer_lost ? "the job went away first"
                 : may_fire    ? "the job closed its session first"
                               : "dumpd stopped first");
  }
  if (recorder_) releaseKept(recorder_->releaseAll());
  // Records whose device tensors the client never sent: the ring goes away with the session.
  releaseAnswered(/*all=*/true);
  const bool step_written =
      selected(step_iteration_) || (recorder_ && recorder_->writes(step_iteration_));
  if (have_step_ && (step_written || writer_->listsEveryIteration())) {
    // finish() below completes every open iteration; the global order gets its last line.
    (void)writer_->appendGlobalExecutionOrder(step_graph_, step_iteration_);
  }
  if (Status s = writer_->finish(takeClientDropped(), cut); !s) {
    warnings_.warn(s.error().message);
  }
  publishSnapshot();
  warnings_.flushSuppressed();
  const std::vector<std::string> unused = filter_.unusedKernels();
  for (size_t i = 0; i < unused.size() && i < kMaxListedKernels; ++i) {
    // MindSpore logs these too.
    spdlog::warn("session {}: unused kernel in job config: {}", id_, escapeForLog(unused[i]));
  }
  if (unused.size() > kMaxListedKernels) {
    spdlog::warn("session {}: ... and {} more unused kernels", id_,
                 unused.size() - kMaxListedKernels);
  }
}

}  // namespace dumpd::daemon
