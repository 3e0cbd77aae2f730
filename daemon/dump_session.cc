#include "daemon/dump_session.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/saturating.h"
#include "base/thread_name.h"

#include <spdlog/spdlog.h>

#include "daemon/log_escape.h"
#include "daemon/worker_priority.h"
#include "ipc/backpressure_wire.h"
#include "ipc/frame.h"
#include "ipc/op_codec.h"

namespace dumpd::daemon {
namespace {

constexpr int kIdleWaitMs = 200;  // consumer sleep between checks when the ring is empty
constexpr int kStopPollMs = 10;   // while waiting for a producer inside a record
constexpr auto kRefreshPeriod = std::chrono::seconds(1);
constexpr size_t kMaxFlushWaits = 1024;

int64_t toNs(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

const char* stateName(DumpSession::State s) {
  switch (s) {
    case DumpSession::State::kSetup:
      return "setup";
    case DumpSession::State::kActive:
      return "active";
    case DumpSession::State::kDraining:
      return "draining";
    case DumpSession::State::kClosed:
      return "closed";
  }
  return "unknown";
}

}  // namespace

bool ClaimRegistry::claim(const std::string& key) {
  MutexLock lock(&mu_);
  return keys_.insert(key).second;
}

void ClaimRegistry::release(const std::string& key) {
  MutexLock lock(&mu_);
  keys_.erase(key);
}

DumpSession::DumpSession(SessionContext ctx, std::weak_ptr<SessionOwner> owner, uint64_t id,
                         PeerIdentity peer, v1::Hello hello, UniqueFd ring_fd, UniqueFd root_fd)
    : ctx_(std::move(ctx)),
      owner_(std::move(owner)),
      id_(id),
      peer_(std::move(peer)),
      hello_(std::move(hello)),
      ring_fd_(std::move(ring_fd)),
      root_fd_(std::move(root_fd)),
      started_(ctx_.env.clock->now()) {}

DumpSession::~DumpSession() {
  // onThreadDone joined it; a session destroyed before start() has no thread.
  if (thread_.joinable()) thread_.detach();
}

void DumpSession::start() {
  thread_ = std::thread([self = shared_from_this()] { self->run(); });
}

void DumpSession::requestStop(TimePoint deadline) {
  int64_t want = toNs(deadline);
  int64_t cur = stop_deadline_ns_.load(std::memory_order_relaxed);
  while (want < cur && !stop_deadline_ns_.compare_exchange_weak(cur, want)) {
  }
  // seq_cst store, then seq_cst load of ready_: with run()'s store of ready_ and load of
  // stop_ this is a Dekker handshake, so either we wake the drain or it sees stop_ itself.
  stop_.store(true, std::memory_order_seq_cst);
  State s = State::kActive;
  state_.compare_exchange_strong(s, State::kDraining);
  if (ready_.load(std::memory_order_seq_cst)) drain_->ring().wakeConsumer();
}

// ------------------------------------------------------------------ session thread

void DumpSession::run() {
  setThreadName("dumpd-session");
  // Set-up too: compiling a hostile job config's patterns then only takes idle CPU time.
  applyWorkerPriority(ctx_.settings.workers_idle_priority);
  if (peer_.pid > 0) {
    producer_pidfd_.reset(static_cast<int>(::syscall(SYS_pidfd_open, peer_.pid, 0)));
  }
  if (setUp()) {
    // A flight recorder holds ring space that only this thread gives back: at SCHED_IDLE, on
    // a node whose cores training keeps busy, it got no CPU and training waited for the
    // space (issue 38). It reads, checks and keeps; the writing stays on the idle writers.
    if (drain_->recorder() != nullptr) applyWorkerPriority(false);
    drainLoop();
    takeOperatorRequests();  // journal lines and a trigger that came at the very end
    const bool shutdown = shutdown_.load();
    const bool lost = producer_lost_.load() || (producerExited() && !goodbye_.load());
    drain_->finish(shutdown ? RingDrain::SessionEnd::kShutdown
                   : lost   ? RingDrain::SessionEnd::kProducerLost
                            : RingDrain::SessionEnd::kClosed);
    const DrainCounters& c = drain_->counters();
    spdlog::info("session {}: closed; {} tensors written ({} bytes), {} dropped, {} write errors",
                 id_, c.tensors_written.load(), c.bytes_written.load(),
                 c.tensors_dropped.load() + drain_->clientDroppedTensors(), drain_->writeErrors());
  }
  if (!claimed_key_.empty()) ctx_.claims.release(claimed_key_);
  state_.store(State::kClosed);
  asio::post(ctx_.io, [self = shared_from_this()] { self->onThreadDone(); });
}

bool DumpSession::setUp() {
  auto prepared = prepareSession(hello_, std::move(ring_fd_), std::move(root_fd_), ctx_.settings,
                                 *ctx_.env.roots, *ctx_.env.rings, &stop_);
  if (stop_.load()) {
    failSetup(v1::Error::SHUTTING_DOWN, "the session was closed during set-up");
    return false;
  }
  if (!prepared) {
    failSetup(wireCode(prepared.error().code), prepared.error().message);
    return false;
  }
  PreparedSession& p = prepared.value();
  if (!ctx_.claims.claim(p.conflict_key)) {
    failSetup(v1::Error::CONFLICT, "another live session already dumps rank " +
                                       std::to_string(hello_.rank()) + " of net " +
                                       p.plan.net_name + " into the same path");
    return false;
  }
  claimed_key_ = p.conflict_key;
  if (stop_.load()) {
    failSetup(v1::Error::SHUTTING_DOWN, "the session was closed during set-up");
    return false;
  }
  auto writer =
      openJobWriter(p, hello_, peer_, ctx_.settings, *ctx_.env.roots, ctx_.accounts.get());
  if (!writer) {
    failSetup(wireCode(writer.error().code), writer.error().message);
    return false;
  }
  const ipc::Backpressure bp =
      ipc::backpressureFromWire(hello_.backpressure()).value_or(ctx_.settings.backpressure);

  auto info = std::make_shared<Info>();
  info->net_name = p.plan.net_name;
  info->path = p.plan.path;
  info->ms_format = config::msFormatName(p.plan.ms_format);
  info->producer = hello_.producer_name() +
                   (hello_.producer_version().empty() ? "" : " " + hello_.producer_version());
  info_.store(info);

  v1::Envelope reply;
  v1::Welcome* w = reply.mutable_welcome();
  w->set_session_id(id_);
  w->set_protocol_major(ipc::kProtocolMajor);
  w->set_protocol_minor(ipc::kProtocolMinor);
  w->set_backpressure(ipc::backpressureToWire(bp));
  w->set_dump_root(p.plan.path);
  w->set_block_timeout_ms(ctx_.settings.block_timeout_ms);
  v1::Limits* l = w->mutable_limits();
  l->set_max_frame_bytes(ipc::kMaxFrameBytes);
  l->set_max_ring_bytes(ctx_.settings.max_ring_bytes);
  l->set_max_name_bytes(ipc::kMaxNameBytes);
  l->set_max_tensors_per_record(ipc::kMaxTensorsPerRecord);
  l->set_max_dims(ipc::kMaxDims);
  spdlog::info("session {}: pid {} uid {} gid {} rank {} device {} net {} path {} ring {} MiB ({})",
               id_, peer_.pid, peer_.uid, peer_.gid, hello_.rank(), hello_.device(),
               escapeForLog(p.plan.net_name), escapeForLog(p.plan.path), p.ring.capacity() >> 20,
               escapeForLog(info->producer));

  Selection initial;
  initial.iteration = p.plan.iterations.toString();
  selection_ = std::make_shared<RuntimeSelection>(initial, p.plan.flight_recorder.has_value());
  std::weak_ptr<DumpSession> weak = weak_from_this();
  DrainLinks links;
  links.on_done = [weak](uint64_t) {
    if (auto s = weak.lock()) s->onRecordsDone();
  };
  links.selection = selection_;
  if (ctx_.recorder_memory) links.recorder.memory = ctx_.recorder_memory->forUid(peer_.uid);
  links.recorder.device.staging_bytes = hello_.device_staging_bytes();
  links.recorder.device.timeout =
      std::chrono::milliseconds(ctx_.settings.recorder_fetch_timeout_ms);
  // Session thread (a fetch of tensors kept on the client's device waits on this).
  links.recorder.device.producer_alive = [weak] {
    auto s = weak.lock();
    // After a Goodbye the client still answers: Client::close() waits for the session's end.
    return s != nullptr && !s->shutdown_.load() && !s->producer_lost_.load() &&
           !s->producerExited();
  };
  links.recorder.on_stopped = [weak] {
    if (auto s = weak.lock()) {
      asio::post(s->ctx_.io, [s] { s->recorderStopped(); });
    }
  };
  drain_ = std::make_shared<RingDrain>(
      DrainIds{id_, hello_.rank(), hello_.device()}, std::move(p.plan), std::move(p.filter),
      std::move(p.ring), std::move(writer.value().fs), std::move(writer.value().writer), ctx_.pool,
      std::move(links));
  refreshFreeBytes();
  State s = State::kSetup;
  state_.compare_exchange_strong(s, State::kActive);
  ready_.store(true, std::memory_order_seq_cst);  // pairs with requestStop
  asio::post(ctx_.io, [self = shared_from_this(), reply = std::move(reply)] {
    if (auto o = self->owner_.lock()) o->send(reply);
  });
  return true;
}

void DumpSession::failSetup(v1::Error::Code code, const std::string& message) {
  drain_.reset();
  postError(code, message);
}

void DumpSession::postError(v1::Error::Code code, const std::string& message) {
  asio::post(ctx_.io, [self = shared_from_this(), code, message] {
    if (auto o = self->owner_.lock()) o->sendErrorAndClose(code, message);
  });
}

void DumpSession::drainLoop() {
  ipc::RingConsumer& ring = drain_->ring();
  const Clock& clock = *ctx_.env.clock;
  bool closing_set = false;
  uint64_t records_since_refresh = 0;
  auto next_refresh = clock.now() + kRefreshPeriod;
  // Status figures (writer counters, unused kernels, free space) once a second, whether the
  // ring is busy or idle.
  const auto maybeRefresh = [&] {
    const auto t = clock.now();
    if (t < next_refresh) return;
    drain_->publishSnapshot();
    refreshFreeBytes();
    next_refresh = t + kRefreshPeriod;
  };
  for (;;) {
    // seq_cst: pairs with requestStop (see there).
    const bool stop = stop_.load(std::memory_order_seq_cst);
    if (stop && !closing_set) {
      // From here the producer starts no record; one it is inside of is still committed.
      ring.setClosing();
      closing_set = true;
    }
    takeOperatorRequests();
    auto r = ring.next();
    if (!r) {
      endCorrupt(r.error().message);
      return;
    }
    if (r.value()) {
      if (stop && toNs(clock.now()) >= stop_deadline_ns_.load(std::memory_order_relaxed)) {
        // A producer that ignores `closing` cannot hold the session open past the deadline.
        spdlog::warn(
            "session {}: still draining at the shutdown deadline; the rest of the "
            "ring is not written",
            id_);
        drain_->warnings().note("records left in the ring at the shutdown deadline");
        return;
      }
      if ((++records_since_refresh & 1023) == 0) maybeRefresh();
      if (!drain_->handle(*r.value())) {
        endCorrupt(drain_->error());
        return;
      }
      // Behind the producer, with a record larger than the recorder's margin coming: kept
      // iterations go back before training waits any longer.
      if (drain_->recorderHoldsSpace() && ring.producerWaiting()) {
        drain_->recorder()->freeSpace(/*producer_waits=*/true);
      }
      continue;
    }
    const auto now = clock.now();
    if (stop) {
      // producerBusy() is a seq_cst load after our seq_cst closing store: if the producer is
      // not inside a record now, it never starts another one, and the head we read next is
      // final (the busy store of its last commit follows that commit's head store).
      if (!ring.producerBusy() && !ring.hasData()) return;
      if (!ring.hasData() && producerExited()) {
        // A client killed with device copies in flight leaves reservations open forever.
        spdlog::warn(
            "session {}: the client (pid {}) exited with records still being filled; "
            "those are not written",
            id_, peer_.pid);
        drain_->warnings().note("the client exited with records still being filled");
        return;
      }
      if (toNs(now) >= stop_deadline_ns_.load(std::memory_order_relaxed)) {
        spdlog::warn(
            "session {}: the client stayed inside a record past the shutdown deadline; "
            "records it commits from now on are not written",
            id_);
        drain_->warnings().note("gave up waiting for the client at the shutdown deadline");
        return;
      }
      ring.waitForData(kStopPollMs);
      continue;
    }
    maybeRefresh();
    // A late answer to a fetch gives its ring space back.
    if (DrainRecorder* r = drain_->recorder()) r->releaseAnswered();
    // The flight recorder gives kept iterations back rather than let training wait for space.
    if (drain_->recorderHoldsSpace() && ring.producerWaiting() &&
        drain_->recorder()->freeSpace(/*producer_waits=*/true)) {
      continue;
    }
    ring.waitForData(kIdleWaitMs, drain_->recorderHoldsSpace());
  }
}

bool DumpSession::producerExited() const {
  if (!producer_pidfd_.valid()) return false;
  // A pidfd polls readable once the process has exited (all of its threads).
  pollfd p{producer_pidfd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

void DumpSession::endCorrupt(const std::string& message) {
  drain_->warnings().note(message);
  spdlog::error("session {}: {}; ending the session", id_, escapeForLog(message));
  postError(v1::Error::CORRUPT_RING, message);
}

void DumpSession::refreshFreeBytes() {
  // fstatvfs on the client's file system may be slow (NFS): it runs here, never on the io
  // thread; status shows the last figure.
  auto f = drain_->writerFreeBytes();
  if (f) {
    free_bytes_.store(*f, std::memory_order_relaxed);
    have_free_bytes_.store(true, std::memory_order_release);
  }
}

void DumpSession::onRecordsDone() {
  if (flush_waiting_.load(std::memory_order_acquire) == 0) return;
  asio::post(ctx_.io, [self = shared_from_this()] { self->checkFlushes(); });
}

// ------------------------------------------------------------------ io thread

bool DumpSession::addFlushWait(uint64_t sequence, uint64_t token) {
  if (flush_waits_.size() >= kMaxFlushWaits) return false;
  flush_waits_.push_back({sequence, token});
  flush_waiting_.store(static_cast<uint32_t>(flush_waits_.size()), std::memory_order_release);
  checkFlushes();
  return true;
}

void DumpSession::checkFlushes() {
  if (flush_waits_.empty()) return;
  auto owner = owner_.lock();
  const bool ready = ready_.load(std::memory_order_acquire);
  // Settled: written, or kept by the flight recorder (nothing a writer still owes).
  const uint64_t done = ready ? drain_->settledSequence() : 0;
  std::vector<FlushWait> still;
  for (const FlushWait& w : flush_waits_) {
    if (w.sequence <= done || finished_) {
      v1::Envelope env;
      v1::FlushReply* r = env.mutable_flush_reply();
      r->set_token(w.token);
      r->set_sequence(done);
      addTotals(r->mutable_counts());
      if (ready) {
        if (auto e = drain_->warnings().lastError()) r->set_last_error(*e);
      }
      if (owner) owner->send(env);
    } else {
      still.push_back(w);
    }
  }
  flush_waits_.swap(still);
  flush_waiting_.store(static_cast<uint32_t>(flush_waits_.size()), std::memory_order_release);
}

void DumpSession::onThreadDone() {
  if (thread_.joinable()) thread_.join();  // it has posted this as its last act
  finished_ = true;
  checkFlushes();
  if (auto o = owner_.lock()) o->sessionFinished();
}

void DumpSession::fillStatus(v1::SessionStatus* out) const {
  out->set_id(id_);
  out->set_pid(peer_.pid);
  out->set_uid(peer_.uid);
  out->set_rank(hello_.rank());
  out->set_device(hello_.device());
  out->set_state(stateName(state_.load()));
  out->set_uptime_s(std::chrono::duration<double>(ctx_.env.clock->now() - started_).count());
  if (auto info = info_.load()) {
    out->set_net_name(info->net_name);
    out->set_path(info->path);
    out->set_producer(info->producer);
    out->set_ms_format(info->ms_format);
  }
  addTotals(out->mutable_counts());
  if (!ready_.load(std::memory_order_acquire)) return;
  const RingDrain& d = *drain_;
  out->set_graph_id(d.graphId());
  out->set_iteration(d.iteration());
  if (std::optional<uint32_t> job = d.ring().producerStep()) out->set_job_iteration(*job);
  out->set_ring_used_bytes(d.ring().usedBytes());
  out->set_ring_capacity_bytes(d.ring().capacity());
  out->set_client_dropped_tensors(d.clientDroppedTensors());
  out->set_open_directories(d.openDirectories());
  if (auto e = d.warnings().lastError()) out->set_last_error(*e);
  if (auto snap = d.snapshot()) {
    for (const std::string& k : snap->unused_kernels) out->add_unused_kernels(k);
    out->set_unused_kernels_total(snap->unused_kernels_total);
    out->set_stop_reason(snap->stop_reason);
  }
  if (const DrainRecorder* r = d.recorder()) r->fillStatus(out->mutable_recorder());
  out->set_replica_mismatches(d.replicaReports().count());
  if (auto last = d.replicaReports().last()) out->set_last_replica_mismatch(*last);
  const Selection sel = selection_->current();
  out->set_selection(sel.iteration);
  out->set_selection_changed(sel.generation != 0);
  out->set_selection_changed_by(sel.changed_by);
  out->set_paused(sel.paused);
  out->set_replica_every(sel.replica_every);
  out->set_journal_lines_refused(d.journalLinesRefused());
}

void DumpSession::addTotals(v1::Counts* c) const {
  if (!ready_.load(std::memory_order_acquire)) return;
  const DrainCounters& k = drain_->counters();
  const auto add = [](uint64_t cur, const std::atomic<uint64_t>& v) {
    return saturatingAdd(cur, v.load(std::memory_order_relaxed));
  };
  c->set_records(add(c->records(), k.records));
  c->set_tensors_received(add(c->tensors_received(), k.tensors_received));
  c->set_tensors_written(add(c->tensors_written(), k.tensors_written));
  c->set_tensors_dropped(
      saturatingAdd(add(c->tensors_dropped(), k.tensors_dropped), drain_->clientDroppedTensors()));
  c->set_tensors_failed(add(c->tensors_failed(), k.tensors_failed));
  c->set_bytes_written(add(c->bytes_written(), k.bytes_written));
  c->set_tensors_filtered(add(c->tensors_filtered(), k.tensors_filtered));
  c->set_tensors_linked(add(c->tensors_linked(), k.tensors_linked));
  c->set_tensors_skipped(add(c->tensors_skipped(), k.tensors_skipped));
}

uint64_t DumpSession::writeErrors() const {
  return ready_.load(std::memory_order_acquire) ? drain_->writeErrors() : 0;
}

std::optional<std::pair<std::string, uint64_t>> DumpSession::disk() const {
  auto info = info_.load();
  if (!info || !have_free_bytes_.load(std::memory_order_acquire)) return std::nullopt;
  return std::make_pair(info->path, free_bytes_.load(std::memory_order_relaxed));
}

}  // namespace dumpd::daemon
