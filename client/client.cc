#include "client/client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/element_count.h"
#include "client/device_pipeline.h"
#include "client/dump_once.h"
#include "ipc/frame.h"
#include "ipc/op_codec.h"
#include "ipc/shm_ring.h"
#include "ipc/socket_io.h"
#include "ipc/socket_path.h"
#include "proto/dumpd.pb.h"

namespace dumpd::client {
namespace {

constexpr uint64_t kDefaultRingBytes = 64ull << 20;
constexpr int kLivenessSliceMs = 200;

// complex64/complex128 have no statistics row: their bytes go to the daemon as they are.
bool hasValueStatistics(DType dtype) {
  return dtype != DType::kComplex64 && dtype != DType::kComplex128;
}

std::optional<uint32_t> envUint(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long n = std::strtoul(v, &end, 10);
  if (errno != 0 || *end != '\0' || n > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(n);
}

uint64_t nowMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// mkdir -p with the caller's own permissions (the daemon never creates the root for us).
Status makeDirs(const std::string& path) {
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = path.find('/', i);
    const size_t end = j == std::string::npos ? path.size() : j;
    cur = path.substr(0, end);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return makeError(ErrorCode::kIo,
                       "cannot create dump directory " + cur + ": " + strerror(errno));
    }
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return {};
}

ErrorCode codeFromWire(v1::Error::Code c) {
  switch (c) {
    case v1::Error::INVALID_CONFIG:
      return ErrorCode::kInvalidConfig;
    case v1::Error::RESOURCE_EXHAUSTED:
      return ErrorCode::kResourceExhausted;
    case v1::Error::IO:
      return ErrorCode::kIo;
    default:
      return ErrorCode::kUnavailable;
  }
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
  out.last_error = last_error;
  return out;
}

}  // namespace

struct Client::Impl {
  Options options;
  config::DumpPlan plan;
  std::optional<config::Filter> filter;
  uint32_t rank = 0;
  uint32_t device = 0;
  std::optional<ipc::RingProducer> ring;
  UniqueFd sock;
  ipc::FrameDecoder decoder;
  ipc::Backpressure backpressure = ipc::Backpressure::kBlock;
  int block_timeout_ms = -1;
  uint64_t session_id = 0;
  uint32_t iteration = 0;
  uint32_t graph_id = 0;
  bool step_selected = true;
  // The job saves statistics only: CUDA tensors send theirs, computed on the device.
  bool device_statistics = false;
  bool closed = false;
  std::string fatal;  // set once the daemon ended the session
  uint64_t flush_token = 0;
  Stats stats;
  // Reused per call so the hot path does not allocate once warm.
  std::vector<ipc::TensorSpec> specs;
  std::vector<const Tensor*> selected;
  std::vector<std::byte*> payloads;
  std::vector<int64_t> shape_scratch;
  std::vector<DeviceCopy> device_copies;
  // Dump once: what this step sent, and this op's references (spec index -> target; a
  // target sequence of 0 is a tensor of the record being built).
  DumpOnceTable once;
  struct SameRef {
    size_t spec;
    DumpOnceTable::Ref target;
  };
  std::vector<SameRef> same_refs;
  std::vector<size_t> memo_specs;
  // Device tensors: created at the first one. Declared after `ring`: destroyed first (it
  // unpins the ring and must wait for copies into it).
  std::unique_ptr<DevicePipeline> pipeline;

  Status ensurePipeline() {
    if (pipeline) return {};
    std::shared_ptr<DeviceApi> api = options.device_api;
    if (!api) {
      auto cuda = cudaDevice();
      if (!cuda) return cuda.error();
      api = cuda.value();
    }
    pipeline = std::make_unique<DevicePipeline>(api, *ring, options.device_staging_bytes);
    return {};
  }

  // Checks the op's selected CUDA tensors: all on one device, with data. Returns that device
  // (-1 when the op has no CUDA tensor).
  Result<int> opDevice(const OpCall& op) const {
    int device = -1;
    for (const Tensor& t : op.tensors) {
      if (t.memory != Memory::kCuda || !filter->ioSelected(t.io)) continue;
      if (t.data == nullptr && t.bytes != 0) {
        return makeError(ErrorCode::kInvalidArgument, "CUDA tensor slot " + std::to_string(t.slot) +
                                                          " of " + std::string(op.op_name) +
                                                          " has no data pointer");
      }
      if (device >= 0 && t.device != device) {
        return makeError(ErrorCode::kInvalidArgument,
                         "the CUDA tensors of " + std::string(op.op_name) + " live on devices " +
                             std::to_string(device) + " and " + std::to_string(t.device) +
                             "; dump them as separate ops");
      }
      device = t.device;
    }
    return device;
  }

  // Dump once: makes `s`, the spec of `t` about to be appended to `specs`, a reference when
  // `t` repeats a tensor sent this step or earlier in this op; else flags it to be remembered.
  void markRepeat(const Tensor& t, ipc::TensorSpec& s) {
    std::optional<DumpOnceTable::Ref> target = once.find(t);
    for (size_t j = 0; !target && j < memo_specs.size(); ++j) {  // twice in one op: x + x
      if (DumpOnceTable::sameTensor(*selected[memo_specs[j]], t)) {
        target = DumpOnceTable::Ref{0, static_cast<uint32_t>(memo_specs[j])};
      }
    }
    if (target) {
      s.payload = ipc::PayloadKind::kSame;
      s.data_bytes = sizeof(ipc::SamePayload);
      same_refs.push_back({specs.size(), *target});
    } else if (once.canRemember(memo_specs.size())) {
      s.memo = true;
      memo_specs.push_back(specs.size());
    }
  }

  void updateStepSelected() {
    step_selected = filter->deviceSelected(device) && filter->iterationSelected(iteration);
  }

  Error dead() const {
    return makeError(ErrorCode::kUnavailable, closed ? "client is closed" : fatal);
  }

  // Reads any frame the daemon sent unasked (an Error ending the session). Non-blocking.
  void pollDaemon() {
    pollfd p{sock.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return;
    std::vector<UniqueFd> fds;
    const ssize_t n = ipc::recvWithFds(sock.get(), decoder, fds);
    if (n == 0) {
      fatal = "dumpd closed the session";
      return;
    }
    for (;;) {
      auto env = decoder.next();
      if (!env) {
        fatal = env.error().message;
        return;
      }
      if (!env.value()) return;
      if (env.value()->has_error()) {
        fatal = "dumpd ended the session: " + env.value()->error().message();
        return;
      }
    }
  }

  // The daemon marked the ring closing (SIGTERM or it ended the session): every record
  // committed before is written; nothing new can start.
  Error closingError() {
    if (fatal.empty()) fatal = "dumpd is shutting down: the dump session is closed";
    return makeError(ErrorCode::kUnavailable, fatal);
  }

  // Waits for ring space under the block policy, watching the daemon's liveness.
  Status waitForSpace(uint64_t body) {
    ++stats.blocked_waits;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      if (ring->waitForSpace(body, kLivenessSliceMs)) return {};
      if (ring->closing()) return closingError();
      pollDaemon();
      if (!fatal.empty()) return dead();
      if (block_timeout_ms > 0 &&
          std::chrono::steady_clock::now() - start > std::chrono::milliseconds(block_timeout_ms)) {
        return makeError(ErrorCode::kTimeout, "ring full for " + std::to_string(block_timeout_ms) +
                                                  " ms (block policy); dumpd is not keeping up");
      }
    }
  }

  // Reserves `body` bytes. nullptr with ok status = dropped (drop policy).
  Result<std::byte*> reserve(ipc::RecordKind kind, uint64_t body, bool may_drop) {
    if (body > ring->maxBodyBytes()) {
      return makeError(ErrorCode::kInvalidArgument,
                       "record of " + std::to_string(body) + " bytes does not fit the ring of " +
                           std::to_string(ring->capacity()) + " bytes; raise ring_bytes");
    }
    for (;;) {
      std::byte* p = ring->tryReserve(kind, body);
      if (p != nullptr) return p;
      if (ring->closing()) return closingError();
      if (may_drop && backpressure == ipc::Backpressure::kDrop) return nullptr;
      if (Status s = waitForSpace(body); !s) return s.error();
    }
  }

  // `device_payload`: the payload is the bytes of this CUDA tensor, copied by the pipeline.
  Status sendControl(const v1::Control& ctl, const void* payload, uint64_t payload_bytes,
                     const Tensor* device_payload = nullptr) {
    if (closed || !fatal.empty()) return dead();
    if (device_payload != nullptr) {
      if (Status s = ensurePipeline(); !s) return s;
    }
    const uint64_t ctl_bytes = ctl.ByteSizeLong();
    const uint64_t payload_off = ipc::alignUp(8 + ctl_bytes, 8);
    const uint64_t body = payload_off + payload_bytes;
    auto r = reserve(ipc::RecordKind::kControl, body, /*may_drop=*/false);
    if (!r) return r.error();
    std::byte* p = r.value();
    const uint32_t len = static_cast<uint32_t>(ctl_bytes);
    std::memcpy(p, &len, 4);
    std::memset(p + 4, 0, 4);
    ctl.SerializeToArray(p + 8, static_cast<int>(ctl_bytes));
    ++stats.records_committed;
    if (device_payload != nullptr && payload_bytes != 0) {
      const DeviceCopy copy{p + payload_off, payload, payload_bytes};
      return pipeline->submit(ring->reservedSequence(), device_payload->device, nullptr,
                              std::span(&copy, 1), 1);
    }
    if (payload_bytes != 0) std::memcpy(p + payload_off, payload, payload_bytes);
    ring->commit();
    return {};
  }
};

Result<std::unique_ptr<Client>> Client::connect(Options options) {
  auto impl = std::make_unique<Impl>();
  std::string text;
  if (options.config_text) {
    text = *options.config_text;
  } else {
    std::string path = options.config_path;
    if (path.empty()) {
      const char* env = std::getenv("MINDSPORE_DUMP_CONFIG");
      if (env == nullptr || *env == '\0') {
        return makeError(ErrorCode::kInvalidConfig,
                         "no job config: pass one or set MINDSPORE_DUMP_CONFIG");
      }
      path = env;
    }
    auto t = config::readTextFile(path);
    if (!t) return makeError(ErrorCode::kInvalidConfig, t.error().message);
    text = std::move(t.value());
  }
  config::Environment env = config::Environment::fromProcess();
  if (!options.ms_format.empty()) env.dumpd_ms_format = options.ms_format;
  auto plan = config::parseDumpPlan(text, env);
  if (!plan) return makeError(ErrorCode::kInvalidConfig, plan.error().message);
  impl->plan = std::move(plan.value());
  auto filter = config::Filter::create(impl->plan);
  if (!filter) return makeError(ErrorCode::kInvalidConfig, filter.error().message);
  impl->filter.emplace(std::move(filter.value()));
  impl->rank = options.rank ? *options.rank : envUint("RANK_ID").value_or(0);
  impl->device = options.device ? *options.device : envUint("DEVICE_ID").value_or(0);
  impl->iteration = impl->plan.initial_iteration;
  impl->updateStepSelected();
  impl->device_statistics = impl->plan.statisticsFromSums();

  auto ring =
      ipc::RingProducer::create(options.ring_bytes ? options.ring_bytes : kDefaultRingBytes);
  if (!ring) return ring.error();
  impl->ring.emplace(std::move(ring.value()));

  if (Status s = makeDirs(impl->plan.path); !s) return s.error();
  UniqueFd root(::open(impl->plan.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) {
    return makeError(ErrorCode::kIo,
                     "cannot open dump path " + impl->plan.path + ": " + strerror(errno));
  }

  const std::string socket_path = ipc::resolveSocketPath(options.socket_path);
  auto sock = ipc::connectUnix(socket_path);
  if (!sock) return sock.error();
  impl->sock = std::move(sock.value());

  v1::Envelope hello_env;
  v1::Hello* hello = hello_env.mutable_hello();
  hello->set_protocol_major(ipc::kProtocolMajor);
  hello->set_protocol_minor(ipc::kProtocolMinor);
  hello->set_pid(::getpid());
  hello->set_rank(impl->rank);
  hello->set_device(impl->device);
  hello->set_job_config(text);
  hello->set_producer_name(options.producer_name);
  hello->set_producer_version(options.producer_version);
  hello->set_ring_bytes(impl->ring->mappedBytes());
  hello->set_device_target(options.device_target);
  hello->set_config_path(options.config_path);
  hello->set_ms_format(std::string(config::msFormatName(impl->plan.ms_format)));
  // A config without "path" dumps beneath $MS_DIAGNOSTIC_DATA_PATH: the daemon validates it
  // in our environment, so it resolves the same directory.
  if (const char* d = std::getenv("MS_DIAGNOSTIC_DATA_PATH")) hello->set_ms_diagnostic_data_path(d);
  if (options.backpressure) {
    hello->set_backpressure(*options.backpressure == ipc::Backpressure::kDrop
                                ? v1::BACKPRESSURE_DROP
                                : v1::BACKPRESSURE_BLOCK);
  }
  const int fds[2] = {impl->ring->memfd(), root.get()};
  if (Status s = ipc::sendFrame(impl->sock.get(), hello_env, fds); !s) return s.error();
  auto reply = ipc::recvFrame(impl->sock.get(), impl->decoder, options.connect_timeout_ms);
  if (!reply) return reply.error();
  if (reply->has_error()) {
    return makeError(codeFromWire(reply->error().code()), reply->error().message());
  }
  if (!reply->has_welcome()) {
    return makeError(ErrorCode::kProtocol, "dumpd answered the Hello with an unexpected message");
  }
  const v1::Welcome& w = reply->welcome();
  impl->session_id = w.session_id();
  impl->backpressure = w.backpressure() == v1::BACKPRESSURE_DROP ? ipc::Backpressure::kDrop
                                                                 : ipc::Backpressure::kBlock;
  impl->block_timeout_ms = w.block_timeout_ms() == 0 ? -1 : static_cast<int>(w.block_timeout_ms());
  impl->options = std::move(options);
  impl->stats.ring_capacity = impl->ring->capacity();
  impl->stats.session_id = impl->session_id;
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() { (void)close(); }

const config::DumpPlan& Client::plan() const { return impl_->plan; }
uint32_t Client::rank() const { return impl_->rank; }
uint32_t Client::device() const { return impl_->device; }
bool Client::stepSelected() const { return impl_->step_selected; }

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
  if (iteration == m.iteration && graph_id == m.graph_id) return {};
  m.iteration = iteration;
  m.graph_id = graph_id;
  m.once.clear();
  m.updateStepSelected();
  v1::Control ctl;
  ctl.mutable_step()->set_graph_id(graph_id);
  ctl.mutable_step()->set_iteration(iteration);
  return m.sendControl(ctl, nullptr, 0);
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
  return reserve(op, /*dump_once=*/false);
}

Result<Reservation> Client::reserve(const OpCall& op, bool dump_once) {
  Impl& m = *impl_;
  Reservation res;
  if (m.closed || !m.fatal.empty()) return m.dead();
  if (!m.step_selected || !m.filter->opSelected(op.op_name, op.marked)) {
    m.stats.tensors_filtered += op.tensors.size();
    return res;
  }
  m.specs.clear();
  m.selected.clear();
  m.same_refs.clear();
  m.memo_specs.clear();
  // Not in overflow mode: there the daemon decides per op from the bytes whether to write.
  // A bin file holds its op's own bytes: there is no file to link a repeat to.
  dump_once = dump_once && m.options.dump_once && m.plan.op_debug_mode != 3 &&
              m.plan.file_format != config::FileFormat::kBin;
  const uint64_t ts = nowMicros();
  uint64_t payload_bytes = 0;
  for (const Tensor& t : op.tensors) {
    if (!m.filter->ioSelected(t.io)) {
      ++m.stats.tensors_filtered;
      continue;
    }
    const auto elements = elementCount(t.shape);
    if (!elements) {
      return makeError(ErrorCode::kInvalidArgument,
                       "tensor slot " + std::to_string(t.slot) + " of " + std::string(op.op_name) +
                           ": a dimension is negative or the shape has more than 2^56 elements");
    }
    const uint64_t want = sourceBytes(t.dtype, *elements);
    if (t.bytes != want) {
      return makeError(ErrorCode::kInvalidArgument,
                       "tensor slot " + std::to_string(t.slot) + " of " + std::string(op.op_name) +
                           ": " + std::to_string(t.bytes) + " bytes given, shape and " +
                           std::string(dtypeName(t.dtype)) + " need " + std::to_string(want));
    }
    ipc::TensorSpec s;
    s.io = static_cast<uint8_t>(t.io);
    s.dtype = static_cast<uint8_t>(t.dtype);
    s.slot = t.slot;
    s.shape = t.shape;
    s.format = t.format;
    s.timestamp_us = ts;
    s.data_bytes = t.bytes;
    if (m.device_statistics && t.memory == Memory::kCuda && t.bytes != 0 &&
        hasValueStatistics(t.dtype)) {
      // Only the statistics cross to the host: computed on the device by the pipeline.
      s.payload = ipc::PayloadKind::kStatistics;
      s.data_bytes = sizeof(ipc::StatsPayload);
    }
    if (dump_once && t.identity != 0 && t.bytes != 0) m.markRepeat(t, s);
    m.specs.push_back(s);
    m.selected.push_back(&t);
    payload_bytes += s.data_bytes;
  }
  if (m.specs.empty()) return res;
  ipc::OpSpec spec;
  spec.graph_id = m.graph_id;
  spec.iteration = m.iteration;
  spec.task_id = op.task_id;
  spec.stream_id = op.stream_id;
  spec.flags = op.marked ? ipc::kOpMarked : 0;
  spec.op_type = op.op_type;
  spec.op_name = op.op_name;
  spec.tensors = m.specs;
  if (Status s = ipc::checkOpSpec(spec); !s) return s.error();
  const uint64_t body = ipc::opBodyBytes(spec);
  auto p = m.reserve(ipc::RecordKind::kOp, body, /*may_drop=*/true);
  if (!p) return p.error();
  if (p.value() == nullptr) {
    m.stats.tensors_dropped += m.specs.size();
    ++m.stats.records_dropped;
    auto* ctl = m.ring->control();
    // Relaxed: informational counters the daemon reads for status.
    ctl->dropped_records.fetch_add(1, std::memory_order_relaxed);
    ctl->dropped_tensors.fetch_add(m.specs.size(), std::memory_order_relaxed);
    return res;
  }
  m.payloads.resize(m.specs.size());
  ipc::writeOpDescriptors(p.value(), spec, m.payloads);
  const uint64_t sequence = m.ring->reservedSequence();
  for (const Impl::SameRef& r : m.same_refs) {
    const ipc::SamePayload same{r.target.sequence == 0 ? sequence : r.target.sequence,
                                r.target.tensor, 0};
    std::memcpy(m.payloads[r.spec], &same, sizeof same);
  }
  for (size_t i : m.memo_specs) {
    m.once.remember(*m.selected[i], {sequence, static_cast<uint32_t>(i)});
  }
  m.stats.tensors_deduplicated += m.same_refs.size();
  res.payloads_.resize(m.specs.size());
  for (size_t i = 0; i < m.specs.size(); ++i) {
    res.payloads_[i] = std::span<std::byte>(m.payloads[i], m.specs[i].data_bytes);
  }
  res.tensors_ = static_cast<uint32_t>(m.specs.size());
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
  auto device = m.opDevice(op);
  if (!device) return device.error();
  if (device.value() >= 0) {
    if (Status s = m.ensurePipeline(); !s) return s.error();
  }
  // reserve() fills m.payloads in the order of m.selected.
  auto r = reserve(op, /*dump_once=*/true);
  if (!r) return r.error();
  Reservation& res = r.value();
  if (!res.active()) return false;
  m.device_copies.clear();
  for (size_t i = 0; i < m.selected.size(); ++i) {
    const Tensor* t = m.selected[i];
    if (t->bytes == 0 || m.specs[i].payload == ipc::PayloadKind::kSame) continue;
    if (t->memory == Memory::kCuda) {
      DeviceCopy c{m.payloads[i], t->data, t->bytes};
      if (m.specs[i].payload == ipc::PayloadKind::kStatistics) {
        c.statistics = true;
        c.dtype = t->dtype;
        c.elements = elementCount(t->shape).value_or(0);
      }
      m.device_copies.push_back(c);
    } else {
      std::memcpy(m.payloads[i], t->data, t->bytes);
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
  if (Status s = m.pipeline->submit(m.ring->reservedSequence(), device.value(), op.stream,
                                    m.device_copies, res.tensors_);
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
  c->set_data_id(std::string(data_id));
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
  for (const auto& n : op_names) e->add_op_names(n);
  return impl_->sendControl(ctl, nullptr, 0);
}

Status Client::saveKernelArgs(std::string_view op_type, std::string_view op_name,
                              const std::vector<std::pair<std::string, std::string>>& args) {
  v1::Control ctl;
  v1::KernelArgs* k = ctl.mutable_kernel_args();
  k->set_graph_id(impl_->graph_id);
  k->set_iteration(impl_->iteration);
  k->set_op_type(std::string(op_type));
  k->set_op_name(std::string(op_name));
  for (const auto& [key, value] : args) (*k->mutable_args())[key] = value;
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
