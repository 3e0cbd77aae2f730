#include "daemon/session.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cstring>

#include "daemon/server.h"
#include "ipc/socket_io.h"
#include "storage/file_system.h"

namespace dumpd::daemon {
namespace {

constexpr int kConsumerWaitMs = 200;

v1::Error::Code wireCode(ErrorCode c) {
  switch (c) {
    case ErrorCode::kInvalidConfig:
      return v1::Error::INVALID_CONFIG;
    case ErrorCode::kResourceExhausted:
      return v1::Error::RESOURCE_EXHAUSTED;
    case ErrorCode::kProtocol:
      return v1::Error::PROTOCOL;
    case ErrorCode::kIo:
    case ErrorCode::kNoSpace:
    case ErrorCode::kPermission:
      return v1::Error::IO;
    default:
      return v1::Error::INTERNAL;
  }
}

// Elements of a shape, or nullopt on overflow.
std::optional<uint64_t> elementCount(std::span<const int64_t> shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  return n;
}

}  // namespace

Session::Session(Server& server, Socket socket, uint64_t id)
    : server_(server),
      socket_(std::move(socket)),
      id_(id),
      started_(std::chrono::steady_clock::now()) {}

Session::~Session() {
  if (consumer_.joinable()) consumer_.join();
}

void Session::start() { doRead(); }

// ------------------------------------------------------------------ socket side (io thread)

void Session::doRead() {
  if (socket_closed_) return;
  auto self = shared_from_this();
  socket_.async_wait(Socket::wait_read, [self](const boost::system::error_code& ec) {
    if (ec) {
      if (ec != asio::error::operation_aborted) self->peerClosed();
      return;
    }
    for (;;) {
      const ssize_t n = ipc::recvWithFds(self->socket_.native_handle(), self->decoder_, self->fds_);
      if (n == -EAGAIN) break;
      if (n <= 0) {
        if (self->decoder_.buffered() != 0 && !self->closing_) {
          spdlog::warn("session {}: connection closed inside a frame ({} bytes of a partial frame)",
                       self->id_, self->decoder_.buffered());
        }
        self->peerClosed();
        return;
      }
      if (self->fds_.size() > 4) {  // never more than a Hello's worth
        self->sendErrorAndClose(v1::Error::PROTOCOL, "unexpected file descriptors");
        return;
      }
      for (;;) {
        auto env = self->decoder_.next();
        if (!env) {
          spdlog::warn("session {}: {}", self->id_, env.error().message);
          self->sendErrorAndClose(v1::Error::PROTOCOL, env.error().message);
          return;
        }
        if (!env.value()) break;
        self->onFrame(*env.value());
        if (self->closing_ || self->socket_closed_) return;
      }
    }
    self->doRead();
  });
}

void Session::onFrame(v1::Envelope& env) {
  switch (env.msg_case()) {
    case v1::Envelope::kHello:
      if (hello_done_) {
        sendErrorAndClose(v1::Error::PROTOCOL, "second Hello on one connection");
        return;
      }
      handleHello(env.hello());
      return;
    case v1::Envelope::kFlush:
      if (!hello_done_) {
        sendErrorAndClose(v1::Error::PROTOCOL, "Flush before Hello");
        return;
      }
      handleFlush(env.flush());
      return;
    case v1::Envelope::kStatusRequest: {
      v1::Envelope reply;
      *reply.mutable_status_reply() = server_.status();
      send(reply);
      return;
    }
    case v1::Envelope::kGoodbye:
      peerClosed();
      return;
    default:
      sendErrorAndClose(v1::Error::PROTOCOL,
                        "unexpected message (field " + std::to_string(env.msg_case()) + ")");
  }
}

void Session::handleHello(const v1::Hello& h) {
  if (h.protocol_major() != ipc::kProtocolMajor) {
    sendErrorAndClose(v1::Error::UNSUPPORTED_VERSION, "protocol version " +
                                                          std::to_string(h.protocol_major()) +
                                                          " is not supported; this dumpd speaks " +
                                                          std::to_string(ipc::kProtocolMajor));
    return;
  }
  if (fds_.size() != 4) {
    sendErrorAndClose(v1::Error::PROTOCOL,
                      "Hello needs 4 file descriptors (ring, data doorbell, space doorbell, "
                      "dump root), got " +
                          std::to_string(fds_.size()));
    return;
  }
  if (server_.stopping()) {
    sendErrorAndClose(v1::Error::RESOURCE_EXHAUSTED, "dumpd is shutting down");
    return;
  }
  auto plan = config::parseDumpPlan(h.job_config(), config::Environment::fromProcess());
  if (!plan) {
    sendErrorAndClose(v1::Error::INVALID_CONFIG, plan.error().message);
    return;
  }
  auto filter = config::Filter::create(plan.value());
  if (!filter) {
    sendErrorAndClose(v1::Error::INVALID_CONFIG, filter.error().message);
    return;
  }
  plan_ = std::move(plan.value());
  filter_.emplace(std::move(filter.value()));

  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    pid_ = cred.pid;
    uid_ = cred.uid;
    gid_ = cred.gid;
  }
  rank_ = h.rank();
  device_ = h.device();
  producer_ = h.producer_name() + (h.producer_version().empty() ? "" : " " + h.producer_version());

  ipc::UniqueFd ring_fd = std::move(fds_[0]);
  ipc::UniqueFd data_fd = std::move(fds_[1]);
  ipc::UniqueFd space_fd = std::move(fds_[2]);
  ipc::UniqueFd root_fd = std::move(fds_[3]);
  fds_.clear();
  if (!ipc::Doorbell::isEventFd(data_fd.get()) || !ipc::Doorbell::isEventFd(space_fd.get())) {
    sendErrorAndClose(v1::Error::PROTOCOL, "doorbell descriptors are not eventfds");
    return;
  }
  struct stat st;
  if (::fstat(root_fd.get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    sendErrorAndClose(v1::Error::PROTOCOL, "dump root descriptor is not a directory");
    return;
  }
  conflict_key_ = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                  std::to_string(rank_) + ":" + plan_.net_name;
  auto ring = ipc::RingConsumer::attach(std::move(ring_fd), h.ring_bytes(),
                                        server_.settings().max_ring_bytes);
  if (!ring) {
    sendErrorAndClose(wireCode(ring.error().code), ring.error().message);
    return;
  }
  ring_.emplace(std::move(ring.value()));
  data_bell_ = ipc::Doorbell(std::move(data_fd));
  space_bell_ = ipc::Doorbell(std::move(space_fd));
  auto stop = ipc::Doorbell::create();
  if (!stop) {
    sendErrorAndClose(v1::Error::INTERNAL, stop.error().message);
    return;
  }
  stop_bell_ = std::move(stop.value());

  if (Status s = server_.registerSession(*this); !s) {
    sendErrorAndClose(s.error().code == ErrorCode::kResourceExhausted
                          ? v1::Error::RESOURCE_EXHAUSTED
                          : v1::Error::CONFLICT,
                      s.error().message);
    return;
  }
  registered_ = true;

  const config::DaemonSettings& settings = server_.settings();
  storage::JobOptions opts;
  opts.rank = rank_;
  opts.device_target = h.device_target().empty() ? "CPU" : h.device_target();
  opts.producer_version = h.producer_version();
  opts.durability = settings.durability;
  opts.compression = settings.compression;
  opts.quota_bytes = settings.job_quota_bytes;
  opts.min_free_bytes = settings.min_free_bytes;
  // Files belong to the client's uid/gid when the daemon may chown (it runs as root).
  storage::PosixOptions fs_opts;
  if (::geteuid() == 0 && uid_ != 0) {
    fs_opts.owner_uid = uid_;
    fs_opts.owner_gid = gid_;
  }
  auto fs = storage::makePosixFileSystem(root_fd.release(), fs_opts);
  if (!fs) {
    sendErrorAndClose(wireCode(fs.error().code), fs.error().message);
    return;
  }
  auto writer = storage::JobWriter::create(std::move(fs.value()), plan_, opts);
  if (!writer) {
    sendErrorAndClose(wireCode(writer.error().code), writer.error().message);
    return;
  }
  writer_ = std::move(writer.value());

  config::Backpressure bp = settings.backpressure;
  if (h.backpressure() == v1::BACKPRESSURE_BLOCK) bp = config::Backpressure::kBlock;
  if (h.backpressure() == v1::BACKPRESSURE_DROP) bp = config::Backpressure::kDrop;

  hello_done_ = true;
  workers_idle_ = settings.workers_idle_priority;
  iteration_ = plan_.initial_iteration;
  {
    std::lock_guard lock(mu_);
    state_ = "active";
  }
  v1::Envelope reply;
  v1::Welcome* w = reply.mutable_welcome();
  w->set_session_id(id_);
  w->set_protocol_major(ipc::kProtocolMajor);
  w->set_protocol_minor(ipc::kProtocolMinor);
  w->set_backpressure(bp == config::Backpressure::kDrop ? v1::BACKPRESSURE_DROP
                                                        : v1::BACKPRESSURE_BLOCK);
  w->set_dump_root(plan_.path);
  w->set_block_timeout_ms(settings.block_timeout_ms);
  v1::Limits* l = w->mutable_limits();
  l->set_max_frame_bytes(ipc::kMaxFrameBytes);
  l->set_max_ring_bytes(settings.max_ring_bytes);
  l->set_max_name_bytes(ipc::kMaxNameBytes);
  l->set_max_tensors_per_record(ipc::kMaxTensorsPerRecord);
  l->set_max_dims(ipc::kMaxDims);
  send(reply);
  spdlog::info("session {}: pid {} uid {} rank {} device {} net {} path {} ring {} MiB ({})", id_,
               pid_, uid_, rank_, device_, plan_.net_name, plan_.path, ring_->capacity() >> 20,
               producer_);
  consumer_ = std::thread([this] { consume(); });
}

void Session::handleFlush(const v1::Flush& f) {
  // A client waits for one flush at a time; a flood of them is a broken or hostile client,
  // and must not grow the daemon's memory.
  constexpr size_t kMaxFlushWaits = 1024;
  if (flush_waits_.size() >= kMaxFlushWaits) {
    sendErrorAndClose(v1::Error::PROTOCOL, "more than 1024 flushes outstanding");
    return;
  }
  flush_waits_.push_back({f.sequence(), f.token()});
  flush_waiting_.store(static_cast<uint32_t>(flush_waits_.size()), std::memory_order_release);
  checkFlushes();
}

void Session::checkFlushes() {
  if (flush_waits_.empty() || socket_closed_) return;
  const uint64_t done = done_sequence_.load(std::memory_order_acquire);
  const bool all_done = consumer_done_.load(std::memory_order_acquire);
  std::vector<FlushWait> still;
  for (const FlushWait& w : flush_waits_) {
    if (w.sequence <= done || all_done) {
      v1::Envelope env;
      v1::FlushReply* r = env.mutable_flush_reply();
      r->set_token(w.token);
      r->set_sequence(done);
      addTotals(r->mutable_counts());
      {
        std::lock_guard lock(mu_);
        r->set_last_error(last_error_);
      }
      send(env);
    } else {
      still.push_back(w);
    }
  }
  flush_waits_.swap(still);
  flush_waiting_.store(static_cast<uint32_t>(flush_waits_.size()), std::memory_order_release);
}

void Session::peerClosed() {
  if (!hello_done_ || consumer_done_.load()) {
    closeSocket();
    return;
  }
  requestStop();
}

void Session::requestStop() {
  if (!hello_done_) {
    closeSocket();
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (state_ == "active") state_ = "draining";
  }
  stop_requested_.store(true, std::memory_order_release);
  stop_bell_.ring();
}

void Session::send(const v1::Envelope& env) {
  if (socket_closed_) return;
  auto frame = ipc::encodeFrame(env);
  if (!frame) {
    spdlog::error("session {}: {}", id_, frame.error().message);
    return;
  }
  write_queue_.push_back(std::move(frame.value()));
  if (!writing_) doWrite();
}

void Session::doWrite() {
  if (write_queue_.empty() || socket_closed_) {
    writing_ = false;
    if (closing_) closeSocket();
    return;
  }
  writing_ = true;
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(write_queue_.front()),
                    [self](const boost::system::error_code& ec, size_t) {
                      if (!self->write_queue_.empty()) self->write_queue_.pop_front();
                      if (ec) {
                        self->write_queue_.clear();
                        self->writing_ = false;
                        if (ec != asio::error::operation_aborted) self->peerClosed();
                        return;
                      }
                      self->doWrite();
                    });
}

void Session::sendErrorAndClose(v1::Error::Code code, const std::string& message) {
  spdlog::warn("session {}: {}", id_, message);
  noteError(message);
  v1::Envelope env;
  env.mutable_error()->set_code(code);
  env.mutable_error()->set_message(message);
  send(env);
  closing_ = true;
  if (hello_done_ && !consumer_done_.load()) {
    requestStop();
  } else if (!writing_) {
    closeSocket();
  }
}

void Session::closeSocket() {
  if (socket_closed_) return;
  if (hello_done_ && !consumer_done_.load()) {
    // Keep the session until its ring is drained; only the socket goes.
    boost::system::error_code ignored;
    socket_.shutdown(Socket::shutdown_both, ignored);
    requestStop();
    return;
  }
  socket_closed_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  server_.sessionEnded(shared_from_this());
}

void Session::onConsumerDone() {
  if (consumer_.joinable()) consumer_.join();
  {
    std::lock_guard lock(mu_);
    state_ = "closed";
  }
  checkFlushes();
  if (!writing_) {
    closeSocket();
  } else {
    closing_ = true;
  }
}

// ------------------------------------------------------------------ consumer thread

void Session::consume() {
  applyWorkerPriority(workers_idle_);
  for (;;) {
    // Read the stop flag before looking at the ring: a client commits, then closes, then we
    // learn of the close, so every record committed before the stop is seen below.
    const bool stop = stop_requested_.load(std::memory_order_acquire);
    auto r = ring_->next();
    if (!r) {
      failFromConsumer(v1::Error::CORRUPT_RING, r.error().message);
      break;
    }
    if (!r.value()) {
      if (stop) break;
      ring_->waitForData(data_bell_, kConsumerWaitMs, stop_bell_.fd());
      stop_bell_.drain();
      continue;
    }
    if (!handleRecord(*r.value())) break;
  }
  waitIdle();
  const uint64_t dropped = ring_->droppedTensors();
  if (have_step_ && filter_->iterationSelected(step_iteration_)) {
    // finish() below completes every open iteration; the global order gets its last line.
    (void)writer_->appendGlobalExecutionOrder(step_graph_, step_iteration_);
  }
  if (Status s = writer_->finish(dropped - dropped_reported_); !s) warnLimited(s.error().message);
  publishUnusedKernels();
  uint64_t suppressed;
  {
    std::lock_guard lock(mu_);
    suppressed = std::exchange(warn_suppressed_, 0);
  }
  if (suppressed != 0) {
    spdlog::warn("session {}: {} similar warning(s) suppressed", id_, suppressed);
  }
  for (const std::string& k : filter_->unusedKernels()) {
    spdlog::warn("session {}: unused kernel in job config: {}", id_, k);  // MindSpore logs this
  }
  const storage::JobCounters jc = writer_->counters();
  spdlog::info("session {}: closed; {} tensors written ({} bytes), {} dropped, {} write errors",
               id_, counters_.tensors_written.load(), counters_.bytes_written.load(),
               counters_.tensors_dropped.load() + dropped, jc.write_errors);
  consumer_done_.store(true, std::memory_order_release);
  asio::post(server_.io(), [self = shared_from_this()] { self->onConsumerDone(); });
}

bool Session::handleRecord(const ipc::RingConsumer::Record& r) {
  counters_.records.fetch_add(r.kind == ipc::RecordKind::kPad ? 0 : 1, std::memory_order_relaxed);
  switch (r.kind) {
    case ipc::RecordKind::kPad:
      pushPending(r.end, 0, true);
      return true;
    case ipc::RecordKind::kOp:
      return handleOp(r);
    case ipc::RecordKind::kControl:
      return handleControl(r);
  }
  return false;
}

namespace {
// One op execution on its way to the writer pool: owns the decoded descriptor copy; the
// payload bytes stay in the ring until the record is released.
struct OpTask {
  ipc::DecodedOp op;
  std::vector<storage::TensorView> views;
};
}  // namespace

bool Session::handleOp(const ipc::RingConsumer::Record& r) {
  auto task = std::make_shared<OpTask>();
  if (Status s = ipc::decodeOp(r.body, r.body_bytes, task->op); !s) {
    failFromConsumer(v1::Error::CORRUPT_RING, s.error().message);
    return false;
  }
  const ipc::DecodedOp& op = task->op;
  const uint32_t n = static_cast<uint32_t>(op.tensors.size());
  counters_.tensors_received.fetch_add(n, std::memory_order_relaxed);
  graph_id_.store(op.graph_id, std::memory_order_relaxed);
  iteration_.store(op.iteration, std::memory_order_relaxed);
  if (!have_step_) {
    have_step_ = true;
    step_graph_ = op.graph_id;
    step_iteration_ = op.iteration;
  }
  const bool marked = (op.flags & ipc::kOpMarked) != 0;
  const bool op_selected = filter_->deviceSelected(device_) &&
                           filter_->iterationSelected(op.iteration) &&
                           filter_->opSelected(op.opName(), marked);
  uint64_t bytes = 0;
  for (const ipc::DecodedTensor& t : op.tensors) {
    if (!storage::dtypeValid(t.dtype)) {
      failFromConsumer(
          v1::Error::CORRUPT_RING,
          "record " + std::to_string(r.sequence) + " has unknown dtype " + std::to_string(t.dtype));
      return false;
    }
    const auto dtype = static_cast<storage::DType>(t.dtype);
    const auto elements = elementCount(op.shape(t));
    if (!elements || storage::sourceBytes(dtype, *elements) != t.data_bytes) {
      failFromConsumer(v1::Error::CORRUPT_RING,
                       "record " + std::to_string(r.sequence) + ": tensor of " +
                           std::string(op.opName()) + " has " + std::to_string(t.data_bytes) +
                           " bytes, which does not match its shape and dtype");
      return false;
    }
    const auto io = static_cast<config::Io>(t.io);
    if (!op_selected || !filter_->ioSelected(io)) {
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
    v.data = std::span<const std::byte>(t.data, t.data_bytes);
    task->views.push_back(v);
    bytes += t.data_bytes;
  }
  if (task->views.empty()) {
    pushPending(r.end, r.sequence, true);
    return true;
  }
  const uint64_t slot = pushPending(r.end, r.sequence, false);
  auto self = shared_from_this();
  server_.pool().submit(bytes + 4096, [self, task, slot] {
    storage::OpRecord rec;
    rec.graph_id = task->op.graph_id;
    rec.iteration = task->op.iteration;
    rec.op_type = task->op.opType();
    rec.op_name = task->op.opName();
    rec.task_id = task->op.task_id;
    rec.stream_id = task->op.stream_id;
    rec.tensors = task->views;
    storage::OpOutcome partial;
    auto out = self->writer_->writeOp(rec, &partial);
    const storage::OpOutcome& done = out ? out.value() : partial;
    self->counters_.tensors_written.fetch_add(done.tensors_written, std::memory_order_relaxed);
    self->counters_.tensors_dropped.fetch_add(done.tensors_dropped, std::memory_order_relaxed);
    self->counters_.bytes_written.fetch_add(done.bytes_written, std::memory_order_relaxed);
    if (!out) {
      // The failing tensor and every one after it in this record.
      self->counters_.tensors_failed.fetch_add(
          task->views.size() - done.tensors_written - done.tensors_dropped,
          std::memory_order_relaxed);
      self->warnLimited(out.error().message);
    }
    self->markDone(slot);
  });
  return true;
}

bool Session::handleControl(const ipc::RingConsumer::Record& r) {
  uint32_t len = 0;
  if (r.body_bytes < 8) {
    failFromConsumer(v1::Error::CORRUPT_RING, "control record shorter than 8 bytes");
    return false;
  }
  std::memcpy(&len, r.body, 4);
  if (len > r.body_bytes - 8) {
    failFromConsumer(v1::Error::CORRUPT_RING, "control message runs past its record");
    return false;
  }
  v1::Control ctl;
  if (!ctl.ParseFromArray(r.body + 8, static_cast<int>(len))) {
    failFromConsumer(v1::Error::CORRUPT_RING, "control record does not parse");
    return false;
  }
  const uint64_t payload_off = ipc::alignUp(8 + uint64_t{len}, 8);
  Status st;
  switch (ctl.msg_case()) {
    case v1::Control::kStep: {
      const uint32_t g = ctl.step().graph_id();
      const uint32_t i = ctl.step().iteration();
      if (have_step_ && (g != step_graph_ || i != step_iteration_)) completeStep();
      have_step_ = true;
      step_graph_ = g;
      step_iteration_ = i;
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
      if (plan_.save_kernel_args && filter_->deviceSelected(device_) &&
          filter_->iterationSelected(k.iteration()) && filter_->opSelected(k.op_name())) {
        std::vector<std::pair<std::string, std::string>> args(k.args().begin(), k.args().end());
        std::sort(args.begin(), args.end());
        st = writer_->writeKernelArgs(k.graph_id(), k.iteration(), k.op_type(), k.op_name(), args);
      }
      break;
    }
    case v1::Control::kConstant: {
      const v1::Constant& c = ctl.constant();
      std::vector<int64_t> shape(c.shape().begin(), c.shape().end());
      bool ok = storage::dtypeValid(static_cast<uint8_t>(c.dtype())) && c.dtype() < 256 &&
                shape.size() <= ipc::kMaxDims;
      for (int64_t d : shape) ok = ok && d >= 0;
      const auto elements = ok ? elementCount(shape) : std::nullopt;
      const auto dtype = static_cast<storage::DType>(c.dtype());
      if (!ok || !elements || storage::sourceBytes(dtype, *elements) != c.data_bytes() ||
          payload_off > r.body_bytes || c.data_bytes() > r.body_bytes - payload_off) {
        failFromConsumer(v1::Error::CORRUPT_RING,
                         "constant " + c.data_id() + " has an inconsistent shape or size");
        return false;
      }
      if (filter_->deviceSelected(device_)) {
        storage::TensorView v;
        v.io = config::Io::kOutput;
        v.dtype = dtype;
        v.shape = shape;
        v.timestamp_us = c.timestamp_us();
        v.data = std::span<const std::byte>(r.body + payload_off, c.data_bytes());
        st = writer_->writeConstant(c.graph_id(), c.data_id(), v);
        if (st) counters_.tensors_written.fetch_add(1, std::memory_order_relaxed);
      }
      break;
    }
    case v1::Control::MSG_NOT_SET:
      failFromConsumer(v1::Error::CORRUPT_RING, "empty control record");
      return false;
  }
  if (!st) warnLimited(st.error().message);
  pushPending(r.end, r.sequence, true);
  return true;
}

void Session::publishUnusedKernels() {
  std::vector<std::string> unused = filter_->unusedKernels();
  std::lock_guard lock(mu_);
  unused_kernels_ = std::move(unused);
}

void Session::completeStep() {
  waitIdle();
  publishUnusedKernels();
  if (!filter_->iterationSelected(step_iteration_)) return;
  const uint64_t dropped = ring_->droppedTensors();
  Status s = writer_->completeIteration(step_graph_, step_iteration_, dropped - dropped_reported_);
  dropped_reported_ = dropped;
  if (!s) warnLimited(s.error().message);
  s = writer_->appendGlobalExecutionOrder(step_graph_, step_iteration_);
  if (!s) warnLimited(s.error().message);
}

void Session::waitIdle() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [this] { return pending_.empty(); });
}

void Session::failFromConsumer(v1::Error::Code code, const std::string& message) {
  spdlog::error("session {}: {}; ending the session", id_, message);
  asio::post(server_.io(), [self = shared_from_this(), code, message] {
    self->sendErrorAndClose(code, message);
  });
}

// ------------------------------------------------------------------ any thread

uint64_t Session::pushPending(uint64_t end, uint64_t sequence, bool done) {
  std::lock_guard lock(mu_);
  pending_.push_back({end, sequence, done});
  const uint64_t slot = first_pending_slot_ + pending_.size() - 1;
  if (done) advanceLocked();
  return slot;
}

void Session::markDone(uint64_t slot) {
  std::lock_guard lock(mu_);
  pending_[slot - first_pending_slot_].done = true;
  advanceLocked();
}

void Session::advanceLocked() {
  uint64_t release_end = 0;
  uint64_t last_sequence = 0;
  while (!pending_.empty() && pending_.front().done) {
    release_end = pending_.front().end;
    if (pending_.front().sequence != 0) last_sequence = pending_.front().sequence;
    pending_.pop_front();
    ++first_pending_slot_;
  }
  if (release_end != 0) ring_->release(release_end, space_bell_);
  if (last_sequence != 0) {
    done_sequence_.store(last_sequence, std::memory_order_release);
    if (flush_waiting_.load(std::memory_order_acquire) != 0) {
      asio::post(server_.io(), [self = shared_from_this()] { self->checkFlushes(); });
    }
  }
  if (pending_.empty()) idle_cv_.notify_all();
}

void Session::noteError(const std::string& message) {
  std::lock_guard lock(mu_);
  last_error_ = message;
}

void Session::warnLimited(const std::string& message) {
  noteError(message);
  // At most kWarnBurst lines per kWarnWindow per session; the rest are counted and
  // summarised, so a misbehaving client or a full disk cannot flood the journal.
  constexpr int kWarnBurst = 5;
  constexpr auto kWarnWindow = std::chrono::seconds(10);
  uint64_t suppressed = 0;
  bool log = false;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - warn_window_start_ >= kWarnWindow) {
      suppressed = warn_suppressed_;
      warn_suppressed_ = 0;
      warn_count_ = 0;
      warn_window_start_ = now;
    }
    if (warn_count_ < kWarnBurst) {
      ++warn_count_;
      log = true;
    } else {
      ++warn_suppressed_;
    }
  }
  if (suppressed != 0) {
    spdlog::warn("session {}: {} similar warning(s) suppressed", id_, suppressed);
  }
  if (log) spdlog::warn("session {}: {}", id_, message);
}

void Session::fillStatus(v1::SessionStatus* out) const {
  out->set_id(id_);
  out->set_pid(pid_);
  out->set_uid(uid_);
  out->set_rank(rank_);
  out->set_device(device_);
  out->set_net_name(plan_.net_name);
  out->set_path(plan_.path);
  out->set_graph_id(graph_id_.load(std::memory_order_relaxed));
  out->set_iteration(iteration_.load(std::memory_order_relaxed));
  addTotals(out->mutable_counts());
  out->set_ring_used_bytes(ring_ ? ring_->usedBytes() : 0);
  out->set_ring_capacity_bytes(ring_ ? ring_->capacity() : 0);
  out->set_producer(producer_);
  out->set_uptime_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  std::lock_guard lock(mu_);
  out->set_state(state_);
  out->set_last_error(last_error_);
  for (const std::string& k : unused_kernels_) out->add_unused_kernels(k);
  if (writer_) out->set_stop_reason(writer_->counters().stop_reason);
}

void Session::addTotals(v1::Counts* c) const {
  const uint64_t ring_dropped = ring_ ? ring_->droppedTensors() : 0;
  c->set_records(c->records() + counters_.records.load(std::memory_order_relaxed));
  c->set_tensors_received(c->tensors_received() +
                          counters_.tensors_received.load(std::memory_order_relaxed));
  c->set_tensors_written(c->tensors_written() +
                         counters_.tensors_written.load(std::memory_order_relaxed));
  c->set_tensors_dropped(c->tensors_dropped() + ring_dropped +
                         counters_.tensors_dropped.load(std::memory_order_relaxed));
  c->set_tensors_failed(c->tensors_failed() +
                        counters_.tensors_failed.load(std::memory_order_relaxed));
  c->set_bytes_written(c->bytes_written() +
                       counters_.bytes_written.load(std::memory_order_relaxed));
  c->set_tensors_filtered(c->tensors_filtered() +
                          counters_.tensors_filtered.load(std::memory_order_relaxed));
}

uint64_t Session::writeErrors() const { return writer_ ? writer_->counters().write_errors : 0; }

}  // namespace dumpd::daemon
