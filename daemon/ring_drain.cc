#include "daemon/ring_drain.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "daemon/log_escape.h"
#include "ipc/op_codec.h"

namespace dumpd::daemon {
namespace {

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
  s.sum_is_average = (p.flags & ipc::kStatsAverage) != 0;
  return s;
}

// A client-written counter, capped so that summing it into daemon-wide totals cannot wrap.
constexpr uint64_t kMaxClientCount = uint64_t{1} << 48;

}  // namespace

RingDrain::RingDrain(DrainIds ids, config::DumpPlan plan, config::Filter filter,
                     ipc::RingConsumer ring, std::shared_ptr<storage::FileSystem> fs,
                     std::unique_ptr<storage::JobWriter> writer, storage::WriterPool& pool,
                     DrainLinks links)
    : ids_(ids),
      plan_(std::move(plan)),
      filter_(std::move(filter)),
      ring_(std::move(ring)),
      fs_(std::move(fs)),
      writer_(std::move(writer)),
      pool_(pool),
      release_(ring_, std::move(links.on_done)),
      warnings_(ids.session),
      selection_(std::move(links.selection)) {
  iteration_.store(plan_.initial_iteration, std::memory_order_relaxed);
  snapshot_.store(std::make_shared<const WriterSnapshot>());
  if (plan_.flight_recorder) {
    recorder_ = std::make_unique<DrainRecorder>(
        ids_.session, ids_.rank, *plan_.flight_recorder, std::move(links.recorder),
        DrainRecorder::Drain{ring_, release_, counters_, warnings_, info_log_, step_, dump_once_,
                             *this});
  }
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
  if (recorderHoldsSpace()) recorder_->keepRoom();
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

RingDrain::Route RingDrain::route(uint32_t iteration) const {
  // Selected iterations are written as the job says; with a flight recorder, the iterations
  // after a trigger are written with its saved_data, and every other one is kept.
  if (selected(iteration)) return Route::kDumped;
  if (recorder_ == nullptr) return Route::kNotDumped;
  if (recorder_->writes(iteration)) return Route::kAfterTrigger;
  return recorder_->recording() ? Route::kKept : Route::kNotDumped;
}

void RingDrain::noteStep(const ipc::RingConsumer::Record& r, const ipc::DecodedOp& op) {
  graph_id_.store(op.graph_id, std::memory_order_relaxed);
  iteration_.store(op.iteration, std::memory_order_relaxed);
  if (!step_.started) step_ = DrainStep{true, op.graph_id, op.iteration};
  // A pause is enforced without a step mark too: from the first record written after dumpd
  // sent it that belongs to another iteration than the step in progress (a client that moves
  // on without step marks would otherwise dump on while paused). The step in progress keeps
  // the grace a step mark gets (the client may not have read the pause yet), so a job's
  // iteration is not cut in two.
  if (!paused_ && selection_ != nullptr &&
      (op.iteration != step_.iteration || op.graph_id != step_.graph) &&
      r.end - ipc::recordLength(r.body_bytes) >= selection_->pausedFrom()) {
    enforcePause(op.iteration);
  }
}

bool RingDrain::handleOp(const ipc::RingConsumer::Record& r) {
  auto task = std::make_shared<OpTask>();
  if (Status s = ipc::decodeOp(r.body, r.body_bytes, task->op); !s) return fail(s.error().message);
  const ipc::DecodedOp& op = task->op;
  counters_.tensors_received.fetch_add(op.tensors.size(), std::memory_order_relaxed);
  noteStep(r, op);
  const Route where = route(op.iteration);
  const bool kept = where == Route::kKept;
  const bool op_selected = where != Route::kNotDumped && filter_.deviceSelected(ids_.device) &&
                           filter_.opSelected(op.opName(), (op.flags & ipc::kOpMarked) != 0);
  const TensorRules rules{plan_.overflowDump(), plan_.statisticsFromSums(), recorder_ != nullptr,
                          where == Route::kDumped};
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < op.tensors.size(); ++i) {
    const ipc::DecodedTensor& t = op.tensors[i];
    Result<CheckedTensor> c = checkTensor(r.sequence, op, t, rules);
    if (!c) return fail(c.error().message);
    if (!op_selected || !filter_.ioSelected(static_cast<Io>(t.io))) {
      counters_.tensors_filtered.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (!addView(*task, r.sequence, i, c.value(), kept)) continue;
    bytes += t.data_bytes;
  }
  if (task->views.empty()) {
    release_.push(r.end, r.sequence, true);
    return true;
  }
  task->bytes = bytes;
  task->sequence = r.sequence;
  if (recorder_) recorder_->sawRecord(r.body_bytes);
  const uint64_t slot = release_.push(r.end, r.sequence, false);
  if (kept) {
    recorder_->keep(std::move(task), slot, ipc::recordLength(r.body_bytes));
  } else if (where == Route::kAfterTrigger) {
    recorder_->writeAfterTrigger(std::move(task), slot);
  } else {
    const uint32_t iteration = op.iteration;
    write(std::move(task), slot);
    if (recorder_) recorder_->wrote(iteration);
  }
  return true;
}

bool RingDrain::addView(OpTask& task, uint64_t sequence, uint32_t index, const CheckedTensor& c,
                        bool kept) {
  const ipc::DecodedOp& op = task.op;
  const ipc::DecodedTensor& t = op.tensors[index];
  storage::TensorView v;
  v.io = static_cast<Io>(t.io);
  v.slot = t.slot;
  v.dtype = c.dtype;
  v.shape = op.shape(t);
  v.format = op.format(t);
  v.timestamp_us = t.timestamp_us;
  const DumpOnceTable::Tensor memo_of{op.graph_id, op.iteration, c.dtype, v.shape};
  switch (t.payload) {
    case ipc::PayloadKind::kSame: {
      DumpOnceTable::Repeat source = dump_once_.find(c.same, memo_of, kept);
      if (source.memo == nullptr) {
        counters_.tensors_failed.fetch_add(1, std::memory_order_relaxed);
        warnings_.warn("record " + std::to_string(sequence) + ": a tensor of " +
                       std::string(op.opName()) + source.problem + "; it is not written");
        return false;
      }
      v.same_as = source.memo.get();
      task.memos.push_back(std::move(source.memo));
      break;
    }
    case ipc::PayloadKind::kStatistics:
    case ipc::PayloadKind::kDeferred:
      if (task.sums.empty()) task.sums.reserve(op.tensors.size());
      task.sums.push_back(sumsFromWire(c.stats));
      v.sums = &task.sums.back();
      if (t.payload == ipc::PayloadKind::kDeferred) {
        task.deferred.push_back(
            {static_cast<uint32_t>(task.views.size()), t.data + ipc::kDeferredHeaderBytes,
             t.data_bytes - ipc::kDeferredHeaderBytes,
             reinterpret_cast<const uint64_t*>(t.data + offsetof(ipc::DeferredPayload, state))});
      }
      break;
    default:
      v.data = std::span<const std::byte>(t.data, t.data_bytes);
      if (t.checked) {
        v.producer_scan = t.non_finite ? storage::TensorView::Scan::kNonFinite
                                       : storage::TensorView::Scan::kFinite;
      }
  }
  if (t.memo && c.elements != 0) {
    if (auto memo = dump_once_.remember(sequence, index, memo_of, kept)) {
      v.memo = memo.get();
      task.memos.push_back(std::move(memo));
    }
  }
  task.views.push_back(v);
  return true;
}

void RingDrain::completeIteration(uint32_t graph, uint32_t iteration, const std::string& cut) {
  if (Status s = writer_->completeIteration(graph, iteration, 0, {}, cut); !s) {
    warnings_.warn(s.error().message);
  }
}

void RingDrain::write(std::shared_ptr<OpTask> task, uint64_t slot) {
  // Taken here, in record order: statistic.csv rows follow the producer's order of ops
  // whichever writer thread finishes first.
  const uint64_t row_ticket = writer_->takeRowTicket(task->saved_data);
  const uint64_t bytes = task->bytes;
  // Blocks while the pool's byte budget, or this session's share of it, is used: the ring
  // then fills and the producer waits or drops, so the daemon's memory stays bounded. The
  // pool serves sessions in turn: this session's backlog never queues ahead of another's.
  pool_.submit(ids_.session, bytes + 4096, [self = shared_from_this(), task, slot, row_ticket] {
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
    if (task->check_values) self->recorder_->offerNonFinite(*task);
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

void RingDrain::completeStep() {
  dump_once_.clear();  // a new step repeats nothing of the last one
  release_.waitIdle();
  const uint32_t iteration = step_.iteration;
  if (recorder_) recorder_->stepEnds(iteration);
  publishSnapshot();
  const bool dumped = written(iteration);
  if (dumped) {
    const std::string cut = recorder_ ? recorder_->cutShort(iteration) : std::string();
    Status s = writer_->completeIteration(step_.graph, iteration, takeClientDropped(), {}, cut);
    if (!s) warnings_.warn(s.error().message);
  }
  if (dumped || writer_->listsEveryIteration()) {
    Status s = writer_->appendGlobalExecutionOrder(step_.graph, iteration);
    if (!s) warnings_.warn(s.error().message);
  }
  if (recorder_) recorder_->stepCompleted(iteration);
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
  if (recorder_ && may_fire) recorder_->sessionEnds(producer_lost);
  // The iteration in progress: the job finished it only if it closed its session.
  std::string cut = producer_lost ? "the job went away during this iteration"
                    : may_fire    ? std::string()
                                  : "dumpd stopped during this iteration";
  if (recorder_) {
    if (cut.empty()) cut = recorder_->cutShort(step_.iteration);
    recorder_->close(producer_lost ? "the job went away first"
                     : may_fire    ? "the job closed its session first"
                                   : "dumpd stopped first");
  }
  if (step_.started && (written(step_.iteration) || writer_->listsEveryIteration())) {
    // finish() below completes every open iteration; the global order gets its last line.
    (void)writer_->appendGlobalExecutionOrder(step_.graph, step_.iteration);
  }
  if (Status s = writer_->finish(takeClientDropped(), cut); !s) {
    warnings_.warn(s.error().message);
  }
  publishSnapshot();
  warnings_.flushSuppressed();
  const std::vector<std::string> unused = filter_.unusedKernels();
  for (size_t i = 0; i < unused.size() && i < kMaxListedKernels; ++i) {
    // MindSpore logs these too.
    spdlog::warn("session {}: unused kernel in job config: {}", ids_.session,
                 escapeForLog(unused[i]));
  }
  if (unused.size() > kMaxListedKernels) {
    spdlog::warn("session {}: ... and {} more unused kernels", ids_.session,
                 unused.size() - kMaxListedKernels);
  }
}

}  // namespace dumpd::daemon
