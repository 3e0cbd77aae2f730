// dumpd._dumpd: the Python binding of dumpd::client::Client (the `dumpd` package re-exports it).
// This file only registers the module's names, signatures and docstrings; the work is done by
// PyClient (py_client.h), the argument parsers (prepared_tensor.h, host_buffer.h,
// device_array.h) and the exceptions (errors.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/fingerprint.h"
#include "client/device_api.h"
#include "client/python/device_array.h"
#include "client/python/errors.h"
#include "client/python/host_buffer.h"
#include "client/python/py_client.h"
#include "client/python/statistics_item.h"
#include "client/replicas.h"

namespace dumpd::python {
namespace {

constexpr const char* kClientDoc =
    R"doc(A connection to the node's dumpd daemon for one training process (one rank).

Client(config=None, socket=None, rank=None, device=None, ring_bytes=None, backpressure=None,
       *, device_staging_bytes=None, cuda_fallback="error", dump_once=True, ms_format=None,
       flight_recorder=None, host_statistics=True)

  config        path of the job's data_dump.json (str or os.PathLike), or a dict holding the
                job config itself; default $MINDSPORE_DUMP_CONFIG.
  socket        the daemon's socket; default $DUMPD_SOCKET, else /run/dumpd/dumpd.sock.
  rank          rank id (names rank_{rank}/); default $RANK_ID, else 0.
  device        device id (checked against support_device); default $DEVICE_ID, else 0.
  ring_bytes    size of the shared-memory ring; default 64 MiB. A record (one op's selected
                tensors) must fit in it.
  backpressure  "block" (wait for ring space; nothing is lost) or "drop" (skip and count the
                tensor); default: the daemon's setting.
  device_staging_bytes
                CUDA tensors: device memory per GPU for snapshots in flight; default 1 GiB.
                0 copies device-to-host on the producer's stream directly.
  cuda_fallback "error" (default): a CUDA tensor where CUDA cannot be used raises DaemonError;
                "host": dumpd.torch copies it with tensor.cpu() instead (one warning).
  dump_once     True (default): a dump_op item given as (array, dtype, identity) whose
                identity repeats one dumped earlier in the step is sent as a reference to it;
                the daemon hard-links that file. dumpd.torch gives every tensor an identity
                from the tensor object and its version counter. False: every item ships its
                bytes.
  ms_format     the MindSpore generation the tree matches: "2.6" (the released layout:
                statistic.csv Op Name sanitised, Shape "(2,3)") or "2.7" (the newer writer:
                full Op Name, Shape "[2,3]", SHA1 categories); default $DUMPD_MS_FORMAT, else
                "2.6".
  flight_recorder
                a dict: the job config's "flight_recorder" section (docs/recorder.md), which
                it replaces; checked like the file's, errors name the key.
  host_statistics
                True (default): an array of which only statistics are written (saved_data
                "statistic" without md5/sha1, or a step a "statistic" recorder keeps) has
                them computed in this process by dumpd's own rule, and 96 bytes cross;
                False: its bytes cross and dumpd computes them.

CUDA tensors (dumpd.DeviceArray, or objects with __cuda_array_interface__) cost the caller a
device copy on the op's stream and no host synchronisation: the bytes reach the ring on a
copy stream of dumpd's; flush() waits for them.

The job config is validated first (ConfigError with the validator's message); then the
ring is created and the daemon contacted (DaemonError when none answers).

dump()/dump_op() copy the data once into shared memory and return: the caller may reuse its
arrays at once; the daemon writes the files. flush() waits until they are on disk.
Calls are serialised internally, so a Client may be shared between threads. Use it as a
context manager, or call close(), to flush and end the session.

Example:
    with dumpd.Client("/path/data_dump.json") as c:
        for step in range(10):
            c.set_step(step)
            y = x @ w
            c.dump_op("MatMul", "Default/MatMul-op0", inputs=[x, w], outputs=[y])
        print(c.flush())
)doc";

constexpr const char* kStatisticsDoc =
    R"doc(A tensor's statistics, computed where the tensor is, for dump_op() in place of it.

Statistics(shape, dtype, values)

  shape   the tensor's dimensions
  dtype   its dumpd dtype name ("float32", "bfloat16", ...; not complex)
  values  10 numbers: the counts of nan, -inf, +inf, zero, negative and positive elements,
          then max and min (NaN excluded), and the plain sums of the values and of their
          squares (taken as float64)

Only a job that writes nothing but statistics takes them (Client.statistics_only); the
statistic.csv row is computed from them as from a device's (avg = sum / count, l2norm =
sqrt(sum_squares)). dumpd.torch makes them inside compiled graphs.
)doc";

constexpr const char* kDeviceArrayDoc =
    R"doc(A C-contiguous array in CUDA device memory, for dump()/dump_op().

DeviceArray(ptr, shape, dtype, device)

  ptr     device address (e.g. torch's tensor.data_ptr())
  shape   the dimensions
  dtype   a dumpd dtype name ("float32", "bfloat16", ...)
  device  the CUDA device ordinal

The dump snapshots the bytes on the op's stream (dump_op(..., stream=...)), so work enqueued
after it on that stream may overwrite or free the memory at once. dumpd.torch builds these
from torch tensors; objects with __cuda_array_interface__ (cupy, numba) are accepted directly.
)doc";

constexpr const char* kDumpDoc =
    R"doc(Dumps one tensor as its own record. Returns False when the pushed-down filter (iteration,
device, kernels, input_output) rejected it -- then the data is not even looked at -- or when
the drop policy skipped it because the ring was full.

  op_type   primitive name, e.g. "Conv2D" (matched by kernel type filters).
  op_name   full scope name, e.g. "Default/conv1-Conv2d/Conv2D-op3" (matched by name and
            name-regex filters; '/', '\', '.' and spaces become '_' in file names).
  io        "input" or "output".
  slot      input/output index.
  array     any C-contiguous buffer (numpy array, memoryview, bytes, ...); other arrays are
            made contiguous first. Supported: bool, int8-64, uint8-64, float16/32/64,
            complex64/128.
  dtype     None (use the array's) or a raw reinterpretation:
              "bfloat16": uint16/int16 array of bfloat16 bit patterns (written as float32);
              "int4": int8/uint8 array of packed pairs, low nibble first; the logical last
                      dimension is twice the packed one (written as int8);
              "uint1": uint8 array of 0/1 values (written as uint8).
  format    the producer's format string (kept in the file name when trans_flag is false).
  stream    CUDA device arrays: the cudaStream_t (int) that produced them; default the
            array's __cuda_array_interface__ stream, else the default stream.

Raises ValueError/TypeError for bad arguments, DaemonError when the session is gone.
)doc";

constexpr const char* kDumpOpDoc =
    R"doc(Dumps one op execution as one record: every selected input and output tensor. Items of
`inputs`/`outputs` are arrays, (array, dtype) pairs for raw "bfloat16"/"int4"/"uint1" data
(dtype None: the array's own), (array, dtype, identity) triples, or None (nothing dumped for
that slot). An identity (a nonzero int) names the array's current contents: within one step,
items with the same identity must hold the same bytes at the same address, and all but the
first are sent as references to it (Client's dump_once). The slot of an item is its index in the list. Only
the tensors the filter selects are looked at and copied. Returns True when a record was
committed.
)doc";

}  // namespace
}  // namespace dumpd::python

PYBIND11_MODULE(_dumpd, m) {
  using namespace dumpd::python;
  m.doc() = "dumpd: stream training tensors to the node's dumpd daemon (MindSpore dump format).";
  m.attr("__version__") = dumpd::client::libraryVersion();

  addExceptionTypes(m);

  py::class_<StatisticsItem>(m, "Statistics", kStatisticsDoc)
      .def(py::init(&makeStatisticsItem), py::arg("shape"), py::arg("dtype"), py::arg("values"))
      .def_readonly("shape", &StatisticsItem::shape)
      .def_property_readonly(
          "dtype", [](const StatisticsItem& s) { return std::string(dtypeName(s.dtype)); })
      .def_property_readonly("count", [](const StatisticsItem& s) { return s.stats.count; });
  py::class_<DeviceArray>(m, "DeviceArray", kDeviceArrayDoc)
      .def(py::init(&makeDeviceArray), py::arg("ptr"), py::arg("shape"), py::arg("dtype"),
           py::arg("device"))
      .def_readonly("ptr", &DeviceArray::ptr)
      .def_readonly("shape", &DeviceArray::shape)
      .def_readonly("device", &DeviceArray::device)
      .def_property_readonly("dtype",
                             [](const DeviceArray& a) { return std::string(dtypeName(a.dtype)); });
  m.def(
      "cuda_unavailable_reason",
      []() -> std::optional<std::string> {
        auto c = dumpd::client::cudaDevice();
        if (c) return std::nullopt;
        return c.error().message;
      },
      "None when CUDA tensors can be dumped in this process, else why not (built without "
      "CUDA, no driver, no device).");

  m.def(
      "fingerprint",
      [](py::handle array) {
        HeldBuffer b;
        b.acquire(array, "array");
        const std::span<const std::byte> bytes(static_cast<const std::byte*>(b.view().buf),
                                               static_cast<size_t>(b.view().len));
        py::gil_scoped_release unlocked;
        return dumpd::fingerprint(bytes);
      },
      py::arg("array"),
      "The replica fingerprint of an array's raw bytes (a C-contiguous copy of it if it is "
      "not): a 64-bit integer that every single-bit flip changes, equal for bit-identical "
      "replicas on any rank and machine (docs/replicas.md). Not a cryptographic hash. A "
      "torch bfloat16 tensor goes through t.view(torch.int16): the same bytes.");

  m.def(
      "_device_digest",
      [](uintptr_t src, uint64_t bytes, uintptr_t result, uintptr_t scratch, int device,
         uintptr_t stream) {
        auto cuda = dumpd::client::cudaDevice();
        if (!cuda) throw std::runtime_error(cuda.error().message);
        py::gil_scoped_release unlocked;
        dumpd::client::DeviceApi& api = *cuda.value();
        auto previous = api.setDevice(device);
        if (!previous) throw std::runtime_error(previous.error().message);
        const dumpd::Status launched = api.fingerprintAsync(
            reinterpret_cast<uint64_t*>(result), reinterpret_cast<uint64_t*>(scratch),
            reinterpret_cast<const void*>(src), bytes,
            reinterpret_cast<dumpd::client::StreamHandle>(stream));
        (void)api.setDevice(previous.value());
        if (!launched) throw std::runtime_error(launched.error().message);
      },
      py::arg("src"), py::arg("bytes"), py::arg("result"), py::arg("scratch"), py::arg("device"),
      py::arg("stream"),
      "dumpd.torch.digest's kernel: enqueues the replica digest of `bytes` bytes of device "
      "memory at `src` on `stream`, written at `result` (an int64 on the device); `scratch`: "
      "two zeroed int64 of that device that this stream's launches share.");

  m.def(
      "compare_replicas",
      [](py::handle table, size_t ranks, size_t tensors) {
        HeldBuffer b;
        b.acquire(table, "table");
        if (b.view().itemsize != 8) throw py::type_error("table must hold 64-bit digests");
        const std::span<const uint64_t> digests(static_cast<const uint64_t*>(b.view().buf),
                                                static_cast<size_t>(b.view().len) / 8);
        auto verdicts = dumpd::client::compareReplicas(digests, ranks, tensors);
        if (!verdicts) throw py::value_error(verdicts.error().message);
        py::list out;
        for (const auto& v : verdicts.value()) {
          out.append(py::make_tuple(v.tensor, v.majority, v.majority_digest, v.ranks));
        }
        return out;
      },
      py::arg("table"), py::arg("ranks"), py::arg("tensors"),
      "Compares gathered replica digests: `table` holds `ranks` rows of `tensors` 64-bit "
      "digests (row r: group rank r's). Returns (tensor, majority, majority_digest, ranks) for "
      "each tensor whose digests differ: `ranks` are those that differ from the majority, or "
      "every rank when no digest is held by more than half (docs/replicas.md).");

  py::class_<PyClient>(m, "Client", kClientDoc)
      .def(py::init(&PyClient::create), py::arg("config") = py::none(),
           py::arg("socket") = py::none(), py::arg("rank") = py::none(),
           py::arg("device") = py::none(), py::arg("ring_bytes") = py::none(),
           py::arg("backpressure") = py::none(), py::kw_only(),
           py::arg("device_staging_bytes") = py::none(), py::arg("cuda_fallback") = "error",
           py::arg("dump_once") = true, py::arg("ms_format") = py::none(),
           py::arg("flight_recorder") = py::none(), py::arg("host_statistics") = true)
      .def("set_step", &PyClient::setStep, py::arg("iteration"), py::arg("graph_id") = 0,
           "Marks the current iteration (and graph). Moving to a new step completes the previous "
           "one. Dumps are filtered by the config's \"iteration\" against this value.")
      .def("trigger", &PyClient::trigger, py::arg("reason") = "",
           "Flight recorder: asks dumpd to write the iterations it keeps now (a \"manual\" "
           "trigger; the reason goes to .dump_metadata/triggers.jsonl). In order with the "
           "tensors dumped before it; flush() after it returns once they are written.")
      .def("report_loss", &PyClient::reportLoss, py::arg("loss"),
           "Flight recorder: this step's loss (a float), for the \"loss_spike\" trigger.")
      .def("report_replica_mismatch", &PyClient::reportReplicaMismatch, py::arg("iteration"),
           py::arg("tensor"), py::arg("ranks"), py::arg("digests"),
           "The replicas of `tensor` in `iteration` differ (docs/replicas.md): `ranks` (group "
           "ranks) differ from the majority; `digests` is every rank's dumpd.fingerprint, in "
           "group rank order. dumpd journals it, shows it in status, and the flight recorder "
           "fires a \"replica_mismatch\" trigger. dumpd.torch.check_replicas calls this.")
      .def("prepare_cuda", &PyClient::prepareCuda, py::arg("device") = 0,
           "Sets up CUDA device `device` for dumps now: pins the ring, allocates "
           "device_staging_bytes of staging, creates the copy stream. Otherwise the first "
           "CUDA tensor pays for it (pinning a large ring takes hundreds of ms). "
           "dumpd.torch.attach calls it for a model on CUDA. DaemonError when CUDA cannot "
           "be used here.")
      .def("should_dump", &PyClient::shouldDump, py::arg("op_name"), py::arg("io") = "output",
           py::kw_only(), py::arg("marked") = false,
           "True when a tensor of op `op_name` on side `io` (\"input\"/\"output\") would be "
           "dumped now. Cheap: use it to skip preparing data that would be filtered. `marked`: "
           "the op carries a set_dump mark (selects it under dump_mode 2).")
      .def("dump", &PyClient::dump, kDumpDoc, py::arg("op_type"), py::arg("op_name"), py::arg("io"),
           py::arg("slot"), py::arg("array"), py::kw_only(), py::arg("dtype") = py::none(),
           py::arg("format") = "DefaultFormat", py::arg("task_id") = 0, py::arg("stream_id") = 0,
           py::arg("marked") = false, py::arg("stream") = py::none())
      .def("dump_op", &PyClient::dumpOp, kDumpOpDoc, py::arg("op_type"), py::arg("op_name"),
           py::arg("inputs") = py::tuple(), py::arg("outputs") = py::tuple(), py::kw_only(),
           py::arg("task_id") = 0, py::arg("stream_id") = 0, py::arg("marked") = false,
           py::arg("stream") = py::none())
      .def("dump_constant", &PyClient::dumpConstant, py::arg("data_id"), py::arg("array"),
           py::arg("graph_id") = 0, py::kw_only(), py::arg("dtype") = py::none(),
           "Dumps a constant/parameter as {net}/{graph_id}/constants/"
           "Parameter.data-{data_id}.0.0.{ts}.output.0.DefaultFormat.{dtype}.npy "
           "(not filtered by iteration or kernels).")
      .def("save_graph", &PyClient::saveGraph, py::arg("graph_id"), py::arg("ir_text") = py::none(),
           py::arg("pb_bytes") = py::none(),
           "Saves graphs/ms_output_trace_code_graph_{graph_id}.ir (ir_text: str) and/or .pb "
           "(pb_bytes: bytes).")
      .def("save_execution_order", &PyClient::saveExecutionOrder, py::arg("graph_id"),
           py::arg("op_names"),
           "Saves execution_order/ms_execution_order_graph_{graph_id}.csv: the full op names "
           "in execution order.")
      .def("save_kernel_args", &PyClient::saveKernelArgs, py::arg("op_type"), py::arg("op_name"),
           py::arg("args"),
           "Saves {op_type}.{op_name}.json with the op's init args (a dict; keys and values "
           "are converted with str()) in the current iteration's directory, when the config "
           "sets save_kernel_args.")
      .def("flush", &PyClient::flush, py::arg("timeout") = py::none(),
           "Blocks until everything dumped so far is on disk, dropped or failed (timeout in "
           "seconds; None waits as long as it takes; DaemonTimeout when it expires). Returns "
           "the session's cumulative counts from the daemon: records, tensors_received, "
           "tensors_written, tensors_dropped, tensors_failed, bytes_written, tensors_filtered, "
           "last_error.")
      .def("stats", &PyClient::stats,
           "Client-side counters: records/tensors/bytes committed to the ring, tensors "
           "filtered (no copy) and dropped, blocked waits, ring capacity and use, current "
           "iteration and graph, session id, closed.")
      .def("close", &PyClient::close, py::arg("timeout") = py::none(),
           "Flushes (up to `timeout` seconds, default 30), says goodbye and closes. "
           "Idempotent; later calls other than stats() raise DaemonError.")
      .def("__enter__", [](py::object self) { return self; })
      .def(
          "__exit__",
          [](PyClient& self, py::handle exc_type, py::handle, py::handle) {
            if (exc_type.is_none()) {
              self.close(std::nullopt);
              return false;
            }
            // Do not hide the exception in flight behind a close() failure.
            try {
              self.close(std::nullopt);
            } catch (py::error_already_set&) {
            }
            return false;
          },
          py::arg("exc_type"), py::arg("exc"), py::arg("tb"))
      .def_property_readonly("step_selected", &PyClient::stepSelected,
                             "True when the current iteration and device are selected at all.")
      .def_property_readonly("statistics_only", &PyClient::statisticsOnly,
                             "True when the job writes nothing but statistics (saved_data "
                             "\"statistic\" without md5/sha1; a flight recorder in "
                             "\"statistic\" mode): Statistics items may stand in for "
                             "tensors.")
      .def_property_readonly("replica_every", &PyClient::replicaEvery,
                             "The replica check period an operator set with dumpctl control "
                             "--replica-every (from the step mark after it), or None.")
      .def_property_readonly("closed", &PyClient::closed)
      .def_property_readonly("rank", &PyClient::rank)
      .def_property_readonly("device", &PyClient::device)
      .def_property_readonly("path", &PyClient::path, "The dump root (the config's path).")
      .def_property_readonly("net_name", &PyClient::netName)
      .def_property_readonly("cuda_fallback", &PyClient::cudaFallback,
                             "\"error\" or \"host\" (see dumpd.torch)")
      .def("__repr__", [](PyClient& self) {
        return "<dumpd.Client rank=" + std::to_string(self.rank()) +
               " device=" + std::to_string(self.device()) + " path='" + self.path() + "' net='" +
               self.netName() + "'" + (self.closed() ? " closed" : "") + ">";
      });
}
