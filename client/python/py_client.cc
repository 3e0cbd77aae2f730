#include "client/python/py_client.h"

#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "client/python/arguments.h"
#include "client/python/errors.h"
#include "client/python/prepared_tensor.h"
#include "ipc/backpressure.h"

namespace dumpd::python {
namespace {

py::dict countsToDict(const client::Counts& c) {
  py::dict d;
  d["records"] = c.records;
  d["tensors_received"] = c.tensors_received;
  d["tensors_written"] = c.tensors_written;
  d["tensors_dropped"] = c.tensors_dropped;
  d["tensors_failed"] = c.tensors_failed;
  d["bytes_written"] = c.bytes_written;
  d["tensors_filtered"] = c.tensors_filtered;
  d["tensors_linked"] = c.tensors_linked;
  d["tensors_skipped"] = c.tensors_skipped;
  d["last_error"] = c.last_error;
  return d;
}

client::OpCall opCall(const std::string& op_type, const std::string& op_name, int64_t task_id,
                      int64_t stream_id, bool marked) {
  client::OpCall op;
  op.op_type = op_type;
  op.op_name = op_name;
  op.task_id = toU32(task_id, "task_id");
  op.stream_id = toU32(stream_id, "stream_id");
  op.marked = marked;
  return op;
}

}  // namespace

std::unique_ptr<PyClient> PyClient::create(
    py::object config, std::optional<std::string> socket, std::optional<int64_t> rank,
    std::optional<int64_t> device, std::optional<int64_t> ring_bytes,
    std::optional<std::string> backpressure, std::optional<int64_t> device_staging_bytes,
    const std::string& cuda_fallback, bool dump_once, std::optional<std::string> ms_format,
    py::object flight_recorder, bool host_statistics) {
  client::Options o;
  o.dump_once = dump_once;
  o.host_statistics = host_statistics;
  if (!flight_recorder.is_none()) {
    if (!py::isinstance<py::dict>(flight_recorder)) {
      throw py::type_error(
          "flight_recorder must be a dict (the job config's flight_recorder "
          "section) or None");
    }
    o.flight_recorder =
        py::module_::import("json").attr("dumps")(flight_recorder).cast<std::string>();
  }
  if (ms_format) {
    if (*ms_format != "2.6" && *ms_format != "2.7") {
      throw py::value_error("ms_format must be \"2.6\" or \"2.7\", got \"" + *ms_format + "\"");
    }
    o.ms_format = *ms_format;
  }
  if (cuda_fallback != "error" && cuda_fallback != "host") {
    throw py::value_error("cuda_fallback must be \"error\" or \"host\", got \"" + cuda_fallback +
                          "\"");
  }
  if (device_staging_bytes) {
    if (*device_staging_bytes < 0) throw py::value_error("device_staging_bytes must be >= 0");
    o.device_staging_bytes = static_cast<uint64_t>(*device_staging_bytes);
  }
  if (!config.is_none()) {
    if (py::isinstance<py::dict>(config)) {
      o.config_text = py::module_::import("json").attr("dumps")(config).cast<std::string>();
    } else {
      o.config_path = py::module_::import("os").attr("fspath")(config).cast<std::string>();
    }
  }
  if (socket) o.socket_path = *socket;
  if (rank) o.rank = toU32(*rank, "rank");
  if (device) o.device = toU32(*device, "device");
  if (ring_bytes) {
    if (*ring_bytes <= 0) throw py::value_error("ring_bytes must be positive");
    o.ring_bytes = static_cast<uint64_t>(*ring_bytes);
  }
  if (backpressure) {
    auto b = ipc::parseBackpressure(*backpressure);
    if (!b) {
      throw py::value_error("backpressure must be \"block\" or \"drop\", got \"" + *backpressure +
                            "\"");
    }
    o.backpressure = b.value();
  }
  o.producer_name = "dumpd-python";
  o.producer_version = client::libraryVersion();
  Result<std::unique_ptr<client::Client>> c = [&] {
    py::gil_scoped_release nogil;
    return client::Client::connect(std::move(o));
  }();
  auto self = std::unique_ptr<PyClient>(new PyClient(unwrap(std::move(c))));
  self->cuda_fallback_ = cuda_fallback;
  return self;
}

PyClient::~PyClient() {
  if (!client_) return;
    // ~Client flushes (bounded) and says Goodbye: let other threads run meanwhile, except
    // while the interpreter is shutting down (threads must not take the GIL back then).
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing();
#else
  const bool finalizing = _Py_IsFinalizing();
#endif
  if (finalizing) {
    client_.reset();
    return;
  }
  py::gil_scoped_release nogil;
  MutexLock lock(&mu_);
  client_.reset();
}

template <typename F>
auto PyClient::locked(F&& f) -> decltype(f(std::declval<client::Client&>())) {
  bool was_closed = false;
  std::optional<decltype(f(std::declval<client::Client&>()))> r;
  {
    py::gil_scoped_release nogil;
    MutexLock lock(&mu_);
    if (closed_) {
      was_closed = true;
    } else {
      r.emplace(f(*client_));
    }
  }
  if (was_closed) raiseDaemonError("client is closed");
  return std::move(*r);
}

template <typename F>
auto PyClient::lockedFast(F&& f, bool allow_closed)
    -> decltype(f(std::declval<client::Client&>())) {
  lockKeepingGil();
  MutexLock lock(&mu_, MutexLock::Adopt{});
  if (closed_ && !allow_closed) {
    lock.unlock();
    raiseDaemonError("client is closed");
  }
  return f(*client_);
}

void PyClient::setStep(int64_t iteration, int64_t graph_id) {
  const uint32_t it = toU32(iteration, "iteration");
  const uint32_t g = toU32(graph_id, "graph_id");
  unwrap(locked([&](client::Client& c) { return c.setStep(it, g); }));
}

void PyClient::trigger(const std::string& reason) {
  unwrap(locked([&](client::Client& c) { return c.trigger(reason); }));
}

void PyClient::reportLoss(double loss) {
  unwrap(locked([&](client::Client& c) { return c.reportLoss(loss); }));
}

void PyClient::reportReplicaMismatch(uint32_t iteration, const std::string& tensor,
                                     const std::vector<uint32_t>& ranks,
                                     const std::vector<uint64_t>& digests) {
  client::Client::ReplicaMismatch m;
  m.iteration = iteration;
  m.tensor = tensor;
  m.ranks = ranks;
  m.digests = digests;
  unwrap(locked([&](client::Client& c) { return c.reportReplicaMismatch(m); }));
}

void PyClient::prepareCuda(int64_t device) {
  if (device < 0 || device > 1024) throw py::value_error("device must be a CUDA ordinal");
  unwrap(locked([&](client::Client& c) { return c.prepareDevice(static_cast<int>(device)); }));
}

bool PyClient::shouldDump(const std::string& op_name, const std::string& io, bool marked) {
  const Io which = parseIo(io);
  return lockedFast([&](client::Client& c) { return c.shouldDump(op_name, which, marked); });
}

bool PyClient::statisticsOnly() {
  return lockedFast([](client::Client& c) { return c.statisticsOnly(); });
}

bool PyClient::stepSelected() {
  return lockedFast([](client::Client& c) { return c.stepSelected(); });
}

std::optional<uint32_t> PyClient::replicaEvery() {
  const uint32_t every = lockedFast([](client::Client& c) { return c.replicaEvery(); });
  return every == 0 ? std::nullopt : std::optional<uint32_t>(every);
}

bool PyClient::dump(const std::string& op_type, const std::string& op_name, const std::string& io,
                    int64_t slot, py::handle array, std::optional<std::string> dtype,
                    const std::string& format, int64_t task_id, int64_t stream_id, bool marked,
                    std::optional<uintptr_t> stream) {
  const Io which = parseIo(io);
  const uint32_t s = toU32(slot, "slot");
  client::OpCall op = opCall(op_type, op_name, task_id, stream_id, marked);
  // Ask the filter before touching the data: a filtered tensor costs no buffer export.
  if (!lockedFast([&](client::Client& c) { return c.shouldDump(op_name, which, marked); })) {
    const client::Tensor t = filteredTensor(which, s);
    op.tensors = std::span(&t, 1);
    return unwrap(locked([&](client::Client& c) { return c.dumpOp(op); }));
  }
  PreparedTensor p;
  prepareTensor(array, dtype, which, s, format, "array", p, /*strided_ok=*/true);
  op.tensors = std::span(&p.tensor, 1);
  op.stream = reinterpret_cast<client::StreamHandle>(stream.value_or(p.cai_stream));
  return unwrap(locked([&](client::Client& c) { return c.dumpOp(op); }));
}

bool PyClient::dumpOp(const std::string& op_type, const std::string& op_name, py::iterable inputs,
                      py::iterable outputs, int64_t task_id, int64_t stream_id, bool marked,
                      std::optional<uintptr_t> stream) {
  for (py::handle list : {inputs, outputs}) {
    // An array is iterable too: dump_op(..., outputs=y) would dump y's rows as slots.
    if (PyObject_CheckBuffer(list.ptr()) || py::hasattr(list, "__array__")) {
      throw py::type_error("inputs and outputs must be lists or tuples of arrays, got " +
                           typeName(list) + " (wrap a single array: outputs=[y])");
    }
  }
  client::OpCall op = opCall(op_type, op_name, task_id, stream_id, marked);
  const auto [want_in, want_out] = lockedFast([&](client::Client& c) {
    return std::pair(c.shouldDump(op_name, Io::kInput, marked),
                     c.shouldDump(op_name, Io::kOutput, marked));
  });
  std::deque<PreparedTensor> prepared;  // stable addresses: tensors point into them
  std::vector<client::Tensor> tensors;
  auto add = [&](py::iterable items, Io io, bool selected, const char* list) {
    uint32_t slot = 0;
    for (py::handle item : items) {
      const std::string what = std::string(list) + "[" + std::to_string(slot) + "]";
      std::optional<ItemRef> ref = parseItem(item, what);
      if (ref) {
        if (selected) {
          PreparedTensor& p = prepared.emplace_back();
          prepareTensor(ref->array, ref->dtype, io, slot, "DefaultFormat", what, p,
                        /*strided_ok=*/true);
          p.tensor.identity = ref->identity;
          tensors.push_back(p.tensor);
        } else {
          tensors.push_back(filteredTensor(io, slot));
        }
      }
      ++slot;
    }
  };
  add(inputs, Io::kInput, want_in, "inputs");
  add(outputs, Io::kOutput, want_out, "outputs");
  op.tensors = tensors;
  uintptr_t cai_stream = 0;
  for (const PreparedTensor& p : prepared) {
    if (p.cai_stream != 0) {
      cai_stream = p.cai_stream;
      break;
    }
  }
  op.stream = reinterpret_cast<client::StreamHandle>(stream.value_or(cai_stream));
  return unwrap(locked([&](client::Client& c) { return c.dumpOp(op); }));
}

void PyClient::dumpConstant(const std::string& data_id, py::handle array, int64_t graph_id,
                            std::optional<std::string> dtype) {
  const uint32_t g = toU32(graph_id, "graph_id");
  PreparedTensor p;
  prepareTensor(array, dtype, Io::kOutput, 0, "DefaultFormat", "array", p);
  unwrap(locked([&](client::Client& c) { return c.dumpConstant(data_id, p.tensor, g); }));
}

void PyClient::saveGraph(int64_t graph_id, std::optional<std::string> ir_text,
                         std::optional<py::bytes> pb) {
  const uint32_t g = toU32(graph_id, "graph_id");
  if (!ir_text && !pb) throw py::value_error("save_graph needs ir_text, pb_bytes or both");
  const std::string ir = ir_text.value_or("");
  const std::string pb_bytes = pb ? std::string(*pb) : std::string();
  unwrap(locked([&](client::Client& c) { return c.saveGraph(g, ir, pb_bytes); }));
}

void PyClient::saveExecutionOrder(int64_t graph_id, py::iterable op_names) {
  const uint32_t g = toU32(graph_id, "graph_id");
  std::vector<std::string> names;
  for (py::handle n : op_names) {
    if (!py::isinstance<py::str>(n)) {
      throw py::type_error("op_names must hold str, got " + typeName(n));
    }
    names.push_back(n.cast<std::string>());
  }
  unwrap(locked([&](client::Client& c) { return c.saveExecutionOrder(g, names); }));
}

void PyClient::saveKernelArgs(const std::string& op_type, const std::string& op_name,
                              py::dict args) {
  std::vector<std::pair<std::string, std::string>> kv;
  for (auto [k, v] : args) kv.emplace_back(py::str(k), py::str(v));
  unwrap(locked([&](client::Client& c) { return c.saveKernelArgs(op_type, op_name, kv); }));
}

py::dict PyClient::flush(std::optional<double> timeout) {
  const int ms = timeoutMs(timeout, -1);  // None: as long as it takes
  return countsToDict(unwrap(locked([&](client::Client& c) { return c.flush(ms); })));
}

void PyClient::lockKeepingGil() {
  if (mu_.tryLock()) return;
  py::gil_scoped_release nogil;
  mu_.lock();
}

py::dict PyClient::stats() {
  client::Stats s;
  bool closed = false;
  {
    lockKeepingGil();
    MutexLock lock(&mu_, MutexLock::Adopt{});
    s = client_->stats();
    closed = closed_;
  }
  py::dict d;
  d["records_committed"] = s.records_committed;
  d["tensors_committed"] = s.tensors_committed;
  d["bytes_committed"] = s.bytes_committed;
  d["tensors_filtered"] = s.tensors_filtered;
  d["tensors_deduplicated"] = s.tensors_deduplicated;
  d["tensors_dropped"] = s.tensors_dropped;
  d["records_dropped"] = s.records_dropped;
  d["blocked_waits"] = s.blocked_waits;
  d["ring_capacity"] = s.ring_capacity;
  d["ring_used"] = s.ring_used;
  d["iteration"] = s.iteration;
  d["graph_id"] = s.graph_id;
  d["session_id"] = s.session_id;
  d["device_records"] = s.device_records;
  d["device_records_staged"] = s.device_records_staged;
  d["device_staging_waits"] = s.device_staging_waits;
  d["device_records_failed"] = s.device_records_failed;
  d["device_in_flight"] = s.device_in_flight;
  d["device_statistics"] = s.device_statistics;
  d["host_statistics"] = s.host_statistics;
  d["given_statistics"] = s.given_statistics;
  d["device_records_deferred"] = s.device_records_deferred;
  d["device_records_fetched"] = s.device_records_fetched;
  d["device_records_released"] = s.device_records_released;
  d["dump_ns"] = s.dump_ns;
  d["device_submit_ns"] = s.device_submit_ns;
  d["device_enqueue_ns"] = s.device_enqueue_ns;
  d["device_wait_ns"] = s.device_wait_ns;
  d["closed"] = closed;
  return d;
}

void PyClient::close(std::optional<double> timeout) {
  const int ms = timeoutMs(timeout, 30000);
  Status s = [&] {
    py::gil_scoped_release nogil;
    MutexLock lock(&mu_);
    if (closed_) return Status();
    closed_ = true;
    return client_->close(ms);
  }();
  unwrap(s);
}

bool PyClient::closed() {
  py::gil_scoped_release nogil;
  MutexLock lock(&mu_);
  return closed_;
}

}  // namespace dumpd::python
