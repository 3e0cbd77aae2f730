#include "client/client.h"

#include <chrono>
#include <cstring>

#include "base/utf8.h"
#include "client/client_impl.h"
#include "client/finite_copy.h"
#include "client/host_statistics.h"
#include "client/op_plan.h"
#include "client/strided_copy.h"

namespace dumpd::client {
namespace {

uint64_t nowMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

Counts countsFromWire(const v1::Counts& c, const std::string& last_error) {
  Counts out;
  out.records = c.records();
  out.tensors_received = c.tensors_received();
  out.tensors_written = c.tensors_written();
  out.tensors_dropped = c.tensors_dropped();
  out.tensors_failed = c.tensors_failed();
  out.bytes_written = c.bytes_written();
  out.tensors_filtered = c.tensors_filtered();
  out.tensors_linked = c.tensors_linked();
  out.tensors_skipped = c.tensors_skipped();
  out.last_error = last_error;
  return out;
}

}  // namespace

Status Client::prepareDevice(int device) {
  Impl& m = *impl_;
  if (m.closed || !m.fatal.empty()) return m.dead();
  if (Status s = m.ensurePipeline(); !s) return s;
  return m.pipeline->prepare(device);
}

Status Client::setStep(uint32_t iteration, uint32_t graph_id) {
  Impl& m = *impl_;
  // Once per step: notice a daemon that ended the session (one non-blocking poll).
  if (!m.closed && m.fatal.empty()) m.pollDaemon();
  if (m.closed || !m.fatal.empty()) return m.dead();
  if (m.step_marked && iteration == m.iteration && graph_id == m.graph_id) return {};
  m.iteration = iteration;
  m.graph_id = graph_id;
  m.once.clear();
  m.applySelection();
  m.updateStepSelected();
  v1::Control ctl;
  ctl.mutable_step()->set_graph_id(graph_id);
  ctl.mutable_step()->set_iteration(iteration);
  ctl.mutable_step()->set_selection_generation(m.selection_generation);
  Status sent = m.sendControl(ctl, nullptr, 0);
  // Not sent (the block policy timed out): the same mark again must send, not pass as done.
  m.step_marked = static_cast<bool>(sent);
  if (sent) m.ring->publishStep(iteration);  // for the daemon's status: the job's step
  return sent;
}

Status Client::trigger(std::string_view reason) {
  v1::Control ctl;
  ctl.mutable_trigger()->set_reason(toWireText(reason, ipc::kMaxTriggerReasonBytes));
  return impl_->sendControl(ctl, nullptr, 0);
}

Status Client::reportReplicaMismatch(const ReplicaMismatch& m) {
  if (m.digests.empty() || m.digests.size() > ipc::kMaxReplicaGroup || m.ranks.empty() ||
      m.ranks.size() > m.digests.size()) {
    return makeError(ErrorCode::kInvalidArgument,
                     "a replica mismatch needs 1 to " + std::to_string(ipc::kMaxReplicaGroup) +
                         " digests (one a rank) and 1 to as many differing ranks");
  }
  for (uint32_t r : m.ranks) {
    if (r >= m.digests.size()) {
      return makeError(ErrorCode::kInvalidArgument, "a replica mismatch names rank " +
                                                        std::to_string(r) + " of a group of " +
                                                        std::to_string(m.digests.size()));
    }
  }
  v1::Control ctl;
  v1::ReplicaMismatch* out = ctl.mutable_replica_mismatch();
  out->set_iteration(m.iteration);
  out->set_tensor(toWireText(m.tensor, ipc::kMaxNameBytes));
  out->mutable_ranks()->Add(m.ranks.begin(), m.ranks.end());
  out->mutable_digests()->Add(m.digests.begin(), m.digests.end());
  out->set_group_size(static_cast<uint32_t>(m.digests.size()));
  return impl_->sendControl(ctl, nullptr, 0);
}

Status Client::reportLoss(double loss) {
  v1::Control ctl;
  ctl.mutable_loss()->set_iteration(impl_->iteration);
  ctl.mutable_loss()->set_value(loss);
  return impl_->sendControl(ctl, nullptr, 0);
}

bool Client::shouldDump(std::string_view op_name, Io io, bool marked) {
  Impl& m = *impl_;
  return m.step_selected && m.filter->ioSelected(io) && m.filter->opSelected(op_name, marked);
}

Result<Reservation> Client::reserveOp(const OpCall& op) {
  for (const Tensor& t : op.tensors) {
    if (t.memory != Memory::kHost) {
      return makeError(ErrorCode::kInvalidArgument,
                       "reserveOp takes host tensors only; dump CUDA tensors with dumpOp");
    }
  }
  Impl& m = *impl_;
  if (m.closed || !m.fatal.empty()) return m.dead();
  if (!m.step_selected || !m.filter->opSelected(op.op_name, op.marked)) {
    m.stats.tensors_filtered += op.tensors.size();
    return Reservation();
  }
  return reserve(op, /*dump_once=*/false);
}

Result<Reservation> Client::reserve(const OpCall& op, bool dump_once) {
  Impl& m = *impl_;
  Reservation res;
  m.same_refs.clear();
  m.memo_specs.clear();
  OpPlanSettings settings;
  settings.want_inputs = m.filter->ioSelected(Io::kInput);
  settings.want_outputs = m.filter->ioSelected(Io::kOutput);
  settings.device_statistics = m.device_statistics;
  settings.defer = m.defersOp(op);
  // From dumpOp only: reserveOp's caller writes the tensor's bytes itself.
  settings.host_statistics = dump_once && m.host_statistics;
  settings.given_statistics = dump_once && m.device_statistics;
  settings.timestamp_us = nowMicros();
  const Status planned = planOp(op, settings, m.op);
  m.stats.tensors_filtered += m.op.filtered;
  if (!planned) return planned.error();
  // Not in overflow mode: there the daemon decides per op from the bytes whether to write.
  // A bin file holds its op's own bytes: there is no file to link a repeat to.
  dump_once = dump_once && m.options.dump_once && !m.plan.overflowDump() &&
              m.plan.file_format != config::FileFormat::kBin;
  uint64_t payload_bytes = 0;
  for (size_t i = 0; i < m.op.specs.size(); ++i) {
    const Tensor& t = *m.op.selected[i];
    if (dump_once && t.identity != 0 && t.bytes != 0 && t.statistics == nullptr) m.markRepeat(i);
    payload_bytes += m.op.specs[i].data_bytes;
  }
  if (m.op.specs.empty()) return res;
  ipc::OpSpec spec;
  spec.graph_id = m.graph_id;
  spec.iteration = m.iteration;
  spec.task_id = op.task_id;
  spec.stream_id = op.stream_id;
  spec.flags = op.marked ? ipc::kOpMarked : 0;
  spec.op_type = op.op_type;
  spec.op_name = op.op_name;
  spec.tensors = m.op.specs;
  if (Status s = ipc::checkOpSpec(spec); !s) return s.error();
  const uint64_t body = ipc::opBodyBytes(spec);
  auto p = m.reserve(ipc::RecordKind::kOp, body, /*may_drop=*/true);
  if (!p) return p.error();
  if (p.value() == nullptr) {
    m.stats.tensors_dropped += m.op.specs.size();
    ++m.stats.records_dropped;
    auto* ctl = m.ring->control();
    // Relaxed: informational counters the daemon reads for status.
    ctl->dropped_records.fetch_add(1, std::memory_order_relaxed);
    ctl->dropped_tensors.fetch_add(m.op.specs.size(), std::memory_order_relaxed);
    return res;
  }
  m.payloads.resize(m.op.specs.size());
  m.descriptors.resize(m.op.specs.size());
  ipc::writeOpDescriptors(p.value(), spec, m.payloads, m.descriptors);
  const uint64_t sequence = m.ring->reservedSequence();
  for (const Impl::SameRef& r : m.same_refs) {
    const ipc::SamePayload same{r.target.sequence == 0 ? sequence : r.target.sequence,
                                r.target.tensor, 0};
    std::memcpy(m.payloads[r.spec], &same, sizeof same);
  }
  for (size_t i : m.memo_specs) {
    m.once.remember(*m.op.selected[i], {sequence, static_cast<uint32_t>(i)});
  }
  m.stats.tensors_deduplicated += m.same_refs.size();
  res.payloads_.resize(m.op.specs.size());
  for (size_t i = 0; i < m.op.specs.size(); ++i) {
    res.payloads_[i] = std::span<std::byte>(m.payloads[i], m.op.specs[i].data_bytes);
  }
  res.tensors_ = static_cast<uint32_t>(m.op.specs.size());
  res.bytes_ = payload_bytes;
  res.active_ = true;
  return res;
}

Result<uint64_t> Client::commitOp(Reservation& r) {
  Impl& m = *impl_;
  if (!r.active_) return makeError(ErrorCode::kInvalidArgument, "reservation is not active");
  r.active_ = false;
  const uint64_t seq = m.ring->commit();
  ++m.stats.records_committed;
  m.stats.tensors_committed += r.tensors_;
  m.stats.bytes_committed += r.bytes_;
  return seq;
}

Result<bool> Client::dumpOp(const OpCall& op) {
  Impl& m = *impl_;
  if (m.closed || !m.fatal.empty()) return m.dead();
  if (!m.step_selected || !m.filter->opSelected(op.op_name, op.marked)) {
    m.stats.tensors_filtered += op.tensors.size();
    return false;
  }
  const auto start = std::chrono::steady_clock::now();
  struct Timer {  // counts this call's time in stats.dump_ns, however it returns
    Stats& stats;
    std::chrono::steady_clock::time_point start;
    ~Timer() {
      stats.dump_ns += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::steady_clock::now() - start)
                                                 .count());
    }
  } timer{m.stats, start};
  auto device = m.opDevice(op);
  if (!device) return device.error();
  if (device.value() >= 0) {
    if (Status s = m.ensurePipeline(); !s) return s.error();
  }
  // reserve() fills m.payloads in the order of m.op.selected.
  auto r = reserve(op, /*dump_once=*/true);
  if (!r) return r.error();
  Reservation& res = r.value();
  if (!res.active()) return false;
  m.device_copies.clear();
  for (size_t i = 0; i < m.op.selected.size(); ++i) {
    const Tensor* t = m.op.selected[i];
    if (t->statistics != nullptr) {  // computed where the tensor is (planOp checked them)
      std::memcpy(m.payloads[i], t->statistics, sizeof(ipc::StatsPayload));
      ++m.stats.given_statistics;
      continue;
    }
    if (t->bytes == 0 || m.op.specs[i].payload == ipc::PayloadKind::kSame) continue;
    if (t->memory == Memory::kCuda) {
      DeviceCopy c{m.payloads[i], t->data, t->bytes};
      if (m.op.specs[i].payload == ipc::PayloadKind::kStatistics) {
        c.statistics = true;
        c.dtype = t->dtype;
        c.elements = elementCount(t->shape).value_or(0);
      } else if (m.op.specs[i].payload == ipc::PayloadKind::kDeferred) {
        // State "on the device" until the pipeline says otherwise; the kernel writes the
        // statistics after this.
        std::memset(m.payloads[i], 0, ipc::kDeferredHeaderBytes);
        c.ring_dst = m.payloads[i] + ipc::kDeferredHeaderBytes;
        c.deferred = true;
        c.dtype = t->dtype;
        c.elements = elementCount(t->shape).value_or(0);
      }
      m.device_copies.push_back(c);
    } else if (m.op.specs[i].payload == ipc::PayloadKind::kStatistics) {
      writeHostStatistics(m.payloads[i], *t, m.plan.ms_format, m.statistics_scratch);
      ++m.stats.host_statistics;
    } else if (isStrided(*t)) {
      copyStrided(m.payloads[i], static_cast<const std::byte*>(t->data), t->shape, t->strides,
                  dtypeSize(t->dtype));
    } else {
      // One read: the copy looks for NaN and inf, so the daemon's recorder need not.
      const bool non_finite = copyFindingNonFinite(
          m.payloads[i], static_cast<const std::byte*>(t->data), t->bytes, t->dtype);
      *m.descriptors[i] |=
          std::byte{static_cast<uint8_t>(ipc::kCheckedBit | (non_finite ? ipc::kNonFiniteBit : 0))};
    }
  }
  if (m.device_copies.empty()) {
    auto c = commitOp(res);
    if (!c) return c.error();
    return true;
  }
  // The pipeline owns the record from here: it commits it when its copies complete, or
  // voids it (the daemon counts its tensors as failed) when they cannot be made.
  res.active_ = false;
  ++m.stats.records_committed;
  m.stats.tensors_committed += res.tensors_;
  m.stats.bytes_committed += res.bytes_;
  if (Status s =
          m.pipeline->submit(m.ring->reservedSequence(), device.value(), op.stream, m.device_copies,
                             res.tensors_, m.iteration, m.ring->reservedEnd());
      !s) {
    return s.error();
  }
  return true;
}

Status Client::dumpConstant(std::string_view data_id, const Tensor& tensor, uint32_t graph_id) {
  const auto elements = elementCount(tensor.shape);
  if (!elements || tensor.bytes != sourceBytes(tensor.dtype, *elements)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "constant " + std::string(data_id) + ": byte size does not match its shape");
  }
  v1::Control ctl;
  v1::Constant* c = ctl.mutable_constant();
  c->set_graph_id(graph_id);
  c->set_data_id(toWireText(data_id));
  c->set_dtype(static_cast<uint32_t>(tensor.dtype));
  for (int64_t d : tensor.shape) c->add_shape(d);
  c->set_timestamp_us(nowMicros());
  c->set_data_bytes(tensor.bytes);
  return impl_->sendControl(ctl, tensor.data, tensor.bytes,
                            tensor.memory == Memory::kCuda ? &tensor : nullptr);
}

Status Client::saveGraph(uint32_t graph_id, std::string_view ir_text, std::string_view pb_bytes) {
  v1::Control ctl;
  v1::GraphArtifact* g = ctl.mutable_graph();
  g->set_graph_id(graph_id);
  g->set_ir_text(std::string(ir_text));
  g->set_pb_bytes(std::string(pb_bytes));
  return impl_->sendControl(ctl, nullptr, 0);
}

Status Client::saveExecutionOrder(uint32_t graph_id, const std::vector<std::string>& op_names) {
  v1::Control ctl;
  v1::ExecutionOrder* e = ctl.mutable_execution_order();
  e->set_graph_id(graph_id);
  for (const auto& n : op_names) e->add_op_names(toWireText(n));
  return impl_->sendControl(ctl, nullptr, 0);
}

Status Client::saveKernelArgs(std::string_view op_type, std::string_view op_name,
                              const std::vector<std::pair<std::string, std::string>>& args) {
  v1::Control ctl;
  v1::KernelArgs* k = ctl.mutable_kernel_args();
  k->set_graph_id(impl_->graph_id);
  k->set_iteration(impl_->iteration);
  k->set_op_type(toWireText(op_type));
  k->set_op_name(toWireText(op_name));
  for (const auto& [key, value] : args) (*k->mutable_args())[toWireText(key)] = toWireText(value);
  return impl_->sendControl(ctl, nullptr, 0);
}

Result<Counts> Client::flush(int timeout_ms) {
  Impl& m = *impl_;
  if (m.closed || !m.fatal.empty()) return m.dead();
  const auto start = std::chrono::steady_clock::now();
  if (m.pipeline) {
    // Device copies first: their records reach the ring when they complete. A failed copy
    // is not an error here: its record was voided and the daemon's counts say so.
    Status d = m.pipeline->drain(timeout_ms);
    if (!d && d.error().code == ErrorCode::kTimeout) return d.error();
    if (timeout_ms >= 0) {
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      timeout_ms = static_cast<int>(std::max<int64_t>(0, timeout_ms - spent.count()));
    }
  }
  v1::Envelope env;
  v1::Flush* f = env.mutable_flush();
  f->set_sequence(m.ring->lastSequence());
  f->set_token(++m.flush_token);
  if (Status s = ipc::sendFrame(m.sock.get(), env); !s) {
    m.fatal = s.error().message;
    return s.error();
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int wait_ms = -1;
    if (timeout_ms >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    auto reply = ipc::recvFrame(m.sock.get(), m.decoder, wait_ms);
    if (!reply) {
      if (reply.error().code != ErrorCode::kTimeout) m.fatal = reply.error().message;
      return reply.error();
    }
    if (reply->has_error()) {
      m.fatal = "dumpd ended the session: " + reply->error().message();
      return makeError(ErrorCode::kUnavailable, m.fatal);
    }
    if (reply->has_selection_update()) {
      m.pending_selection = reply->selection_update();  // applied at the next step mark
      continue;
    }
    if (reply->has_flush_reply() && reply->flush_reply().token() == m.flush_token) {
      return countsFromWire(reply->flush_reply().counts(), reply->flush_reply().last_error());
    }
  }
}

Stats Client::stats() const {
  Stats s = impl_->stats;
  s.ring_used = impl_->ring->usedBytes();
  s.iteration = impl_->iteration;
  s.graph_id = impl_->graph_id;
  if (impl_->pipeline) {
    const PipelineCounters c = impl_->pipeline->counters();
    s.device_records = c.records;
    s.device_records_staged = c.staged_records;
    s.device_staging_waits = c.staging_waits;
    s.device_records_failed = c.failed_records;
    s.device_statistics = c.statistics;
    s.device_records_deferred = c.deferred_records;
    s.device_records_fetched = c.deferred_filled;
    s.device_records_released = c.deferred_dropped;
    s.device_submit_ns = c.submit_ns;
    s.device_enqueue_ns = c.enqueue_ns;
    s.device_wait_ns = c.wait_ns;
    s.device_in_flight = impl_->pipeline->inFlight();
  }
  return s;
}

Status Client::close(int timeout_ms) {
  Impl& m = *impl_;
  if (m.closed) return {};
  Status result;
  if (m.fatal.empty()) {
    auto f = flush(timeout_ms);
    if (!f) result = f.error();
    v1::Envelope bye;
    bye.mutable_goodbye();
    if (ipc::sendFrame(m.sock.get(), bye).has_value()) {
      // The daemon closes the connection once the session is finished: the last
      // iteration's manifest line is written. Wait for that, within the timeout.
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd p{m.sock.get(), POLLIN, 0};
        if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
        std::vector<UniqueFd> fds;
        const ssize_t n = ipc::recvWithFds(m.sock.get(), m.decoder, fds);
        if (n == 0 || (n < 0 && n != -EAGAIN)) break;
      }
    }
  }
  ::shutdown(m.sock.get(), SHUT_RDWR);
  m.sock.reset();
  m.closed = true;
  return result;
}

}  // namespace dumpd::client
