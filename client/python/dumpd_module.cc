// dumpd._dumpd: the Python binding of dumpd::client::Client (the `dumpd` package re-exports it).
//
// Threading rule: the C++ Client is single-threaded, so every call takes the binding's mutex.
// A thread never blocks on that mutex while holding the GIL (it releases the GIL first), and
// the mutex holder never needs the GIL, so the two locks cannot deadlock. Tensor copies,
// commits, backpressure waits and flushes all run with the GIL released.
//
// Zero-copy contract: a C-contiguous buffer is copied once, from the caller's memory straight
// into the shared-memory ring. Only a non-contiguous array is first made contiguous (numpy).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/element_count.h"
#include "base/result.h"
#include "client/client.h"
#include "client/device_api.h"
#include "config/filter.h"
#include "ipc/backpressure.h"

#ifndef DUMPD_VERSION
#define DUMPD_VERSION "0.0.0"
#endif

namespace py = pybind11;

namespace dumpd::python {
namespace {

// The package's exception types. Owned by the module object (module attributes); the raw
// handles stay valid for the module's lifetime and are never decref'd at process exit.
struct ExceptionTypes {
  py::handle base;
  py::handle config;
  py::handle daemon;
  py::handle timeout;
};
ExceptionTypes g_exc;

[[noreturn]] void raise(py::handle type, const std::string& message) {
  PyErr_SetString(type.ptr(), message.c_str());
  throw py::error_already_set();
}

// Maps a C++ error to the package's exceptions. REQUIRES: the GIL is held.
[[noreturn]] void raiseError(const Error& e) {
  switch (e.code) {
    case ErrorCode::kInvalidConfig:
      raise(g_exc.config, e.message);
    case ErrorCode::kInvalidArgument:
      throw py::value_error(e.message);
    case ErrorCode::kTimeout:
      raise(g_exc.timeout, e.message);
    default:
      raise(g_exc.daemon, e.message);
  }
}

template <typename T>
T unwrap(Result<T>&& r) {
  if (!r) raiseError(r.error());
  return std::move(r).value();
}

void unwrap(const Status& s) {
  if (!s) raiseError(s.error());
}
void unwrap(Status&& s) { unwrap(static_cast<const Status&>(s)); }

uint32_t toU32(int64_t v, const char* what) {
  if (v < 0 || v > static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
    throw py::value_error(std::string(what) + " must be in [0, 2**32), got " + std::to_string(v));
  }
  return static_cast<uint32_t>(v);
}

Io parseIo(std::string_view io) {
  if (io == "input") return Io::kInput;
  if (io == "output") return Io::kOutput;
  throw py::value_error("io must be \"input\" or \"output\", got \"" + std::string(io) + "\"");
}

std::string typeName(py::handle obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

// ---------------------------------------------------------------------------------------------
// Buffers

// A C-contiguous view of a Python object's memory. Holds the exporter (and the contiguous
// copy, when one was needed) alive. REQUIRES: constructed and destroyed with the GIL held.
class HeldBuffer {
 public:
  HeldBuffer() = default;
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;
  ~HeldBuffer() {
    if (held_) PyBuffer_Release(&view_);
  }

  // Raises TypeError for objects that are neither buffers nor array-likes, and for dtypes
  // that cannot be exported as a buffer (object, datetime, ...).
  void acquire(py::handle obj, const std::string& what) {
    constexpr int kFlags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_CheckBuffer(obj.ptr())) {
      if (PyObject_GetBuffer(obj.ptr(), &view_, kFlags) == 0) {
        held_ = true;
        return;
      }
      PyErr_Clear();  // not C-contiguous (or not exportable as such): try numpy below
    } else if (!py::hasattr(obj, "__array__") && !py::hasattr(obj, "__array_interface__")) {
      throw py::type_error(what + " must be a numpy array or an object with the buffer " +
                           "protocol, got " + typeName(obj));
    }
    py::object numpy = py::module_::import("numpy");
    copy_ = numpy.attr("ascontiguousarray")(obj);
    if (PyObject_GetBuffer(copy_.ptr(), &view_, kFlags) != 0) {
      PyErr_Clear();
      std::string dtype =
          py::hasattr(copy_, "dtype") ? std::string(py::str(copy_.attr("dtype"))) : typeName(obj);
      throw py::type_error(what + ": unsupported dtype " + dtype);
    }
    held_ = true;
  }

  const Py_buffer& view() const { return view_; }

 private:
  Py_buffer view_{};
  bool held_ = false;
  py::object copy_;
};

// The element type of a buffer from its struct-module format ("f", "<i8", "Zd", "?").
DType dtypeOfBuffer(const Py_buffer& v, const std::string& what) {
  std::string_view fmt = v.format != nullptr ? v.format : "B";
  bool big_endian = false;
  while (!fmt.empty() && std::string_view("@=<>!").find(fmt.front()) != std::string_view::npos) {
    big_endian = fmt.front() == '>' || fmt.front() == '!';
    fmt.remove_prefix(1);
  }
  const ssize_t size = v.itemsize;
  std::optional<DType> t;
  auto byWidth = [size](DType s1, DType s2, DType s4, DType s8) -> std::optional<DType> {
    switch (size) {
      case 1:
        return s1;
      case 2:
        return s2;
      case 4:
        return s4;
      case 8:
        return s8;
      default:
        return std::nullopt;
    }
  };
  if (fmt == "?" && size == 1) {
    t = DType::kBool;
  } else if (fmt.size() == 1 && std::string_view("bhilqn").find(fmt[0]) != std::string_view::npos) {
    t = byWidth(DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64);
  } else if (fmt.size() == 1 && std::string_view("BHILQN").find(fmt[0]) != std::string_view::npos) {
    t = byWidth(DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64);
  } else if (fmt == "e" && size == 2) {
    t = DType::kFloat16;
  } else if (fmt == "f" && size == 4) {
    t = DType::kFloat32;
  } else if (fmt == "d" && size == 8) {
    t = DType::kFloat64;
  } else if (fmt == "Zf" && size == 8) {
    t = DType::kComplex64;
  } else if (fmt == "Zd" && size == 16) {
    t = DType::kComplex128;
  }
  if (!t) {
    throw py::type_error(what + ": unsupported element type (buffer format '" +
                         std::string(v.format != nullptr ? v.format : "") + "', itemsize " +
                         std::to_string(size) +
                         "); supported: bool, int8-64, uint8-64, float16/32/64, complex64/128 " +
                         "(bfloat16/int4/uint1 as raw data with dtype=)");
  }
  if (big_endian && size > 1) {
    throw py::value_error(what + ": big-endian data is not supported; convert it first, e.g. " +
                          "arr.astype(arr.dtype.newbyteorder('<'))");
  }
  return *t;
}

// A C-contiguous array in CUDA device memory, described by pointer (dumpd.DeviceArray, which
// dumpd.torch builds from a torch tensor). The caller keeps the memory alive until the op's
// stream has run past the dump (a caching allocator does).
struct DeviceArray {
  uint64_t ptr = 0;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  int device = 0;
};

DType parseDtypeName(const std::string& name, const std::string& what) {
  const std::optional<DType> t = dtypeFromName(name);
  if (!t) throw py::value_error(what + ": unknown dtype \"" + name + "\"");
  return *t;
}

// The CUDA runtime for arrays given by pointer, or the error that says why there is none.
Result<std::shared_ptr<client::DeviceApi>> cuda() { return client::cudaDevice(); }

// DType of a __cuda_array_interface__ typestr ("<f4", "|b1", "<i8", ...).
std::optional<DType> dtypeOfTypestr(std::string_view ts) {
  if (ts.size() < 3) return std::nullopt;
  const char order = ts[0];
  const char kind = ts[1];
  const std::string_view width = ts.substr(2);
  if (order == '>' && width != "1") return std::nullopt;
  if (kind == 'b' && width == "1") return DType::kBool;
  if (kind == 'i') {
    if (width == "1") return DType::kInt8;
    if (width == "2") return DType::kInt16;
    if (width == "4") return DType::kInt32;
    if (width == "8") return DType::kInt64;
  }
  if (kind == 'u') {
    if (width == "1") return DType::kUInt8;
    if (width == "2") return DType::kUInt16;
    if (width == "4") return DType::kUInt32;
    if (width == "8") return DType::kUInt64;
  }
  if (kind == 'f') {
    if (width == "2") return DType::kFloat16;
    if (width == "4") return DType::kFloat32;
    if (width == "8") return DType::kFloat64;
  }
  if (kind == 'c') {
    if (width == "8") return DType::kComplex64;
    if (width == "16") return DType::kComplex128;
  }
  return std::nullopt;
}

// One tensor ready for Client::dumpOp: its buffer, logical shape, and descriptor.
struct PreparedTensor {
  HeldBuffer buffer;
  std::vector<int64_t> shape;
  client::Tensor tensor;
  py::object keep;  // the device array's owner, alive until the op is enqueued
  // For __cuda_array_interface__ objects: the stream it names (0: none given).
  uintptr_t cai_stream = 0;
};

// A device array's tensor. Raises DaemonError when CUDA cannot be used here.
void prepareDevice(const DeviceArray& a, Io io, uint32_t slot, std::string_view format,
                   const std::string& what, PreparedTensor& out) {
  out.shape = a.shape;
  const auto elements = elementCount(out.shape);
  if (!elements) throw py::value_error(what + ": bad shape");
  out.tensor.io = io;
  out.tensor.slot = slot;
  out.tensor.dtype = a.dtype;
  out.tensor.shape = out.shape;
  out.tensor.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(a.ptr));
  out.tensor.bytes = sourceBytes(a.dtype, *elements);
  out.tensor.format = format;
  out.tensor.memory = client::Memory::kCuda;
  out.tensor.device = a.device;
}

// An object with __cuda_array_interface__ (cupy, numba, torch without grad, ...).
void prepareCudaInterface(py::handle obj, std::optional<std::string> dtype_override, Io io,
                          uint32_t slot, std::string_view format, const std::string& what,
                          PreparedTensor& out) {
  py::dict cai = obj.attr("__cuda_array_interface__");
  DeviceArray a;
  py::tuple data = cai["data"];
  a.ptr = data[0].cast<uint64_t>();
  for (py::handle d : py::tuple(cai["shape"])) a.shape.push_back(d.cast<int64_t>());
  const std::string typestr = cai["typestr"].cast<std::string>();
  const std::optional<DType> natural = dtypeOfTypestr(typestr);
  if (!natural)
    throw py::type_error(what + ": unsupported __cuda_array_interface__ typestr " + typestr);
  a.dtype = *natural;
  if (dtype_override) {
    const DType want = parseDtypeName(*dtype_override, what);
    if (want != DType::kBFloat16 || (a.dtype != DType::kInt16 && a.dtype != DType::kUInt16)) {
      throw py::value_error(what +
                            ": a device array only takes dtype=\"bfloat16\" (over int16 "
                            "or uint16 bits)");
    }
    a.dtype = want;
  }
  if (cai.contains("strides") && !cai["strides"].is_none()) {
    // C-contiguous strides are allowed; anything else must be made contiguous first.
    int64_t expect = static_cast<int64_t>(dtypeSize(*natural));
    py::tuple strides = cai["strides"];
    for (size_t i = a.shape.size(); i-- > 0;) {
      if (a.shape[i] != 1 && strides[i].cast<int64_t>() != expect) {
        throw py::value_error(what +
                              ": a non-contiguous device array cannot be dumped; make it "
                              "contiguous first (e.g. .contiguous() or cupy.ascontiguousarray)");
      }
      expect *= a.shape[i];
    }
  }
  if (cai.contains("stream") && !cai["stream"].is_none()) {
    out.cai_stream = cai["stream"].cast<uintptr_t>();
  }
  auto api = cuda();
  if (!api) raiseError(api.error());
  if (out.cai_stream == 0 && py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_cuda")) {
    // A torch tensor names no stream in its interface: its producer is torch's current
    // stream, which may be a side stream.
    py::object torch_cuda = py::module_::import("torch.cuda");
    py::object device = obj.attr("device");
    out.cai_stream =
        torch_cuda.attr("current_stream")(device).attr("cuda_stream").cast<uintptr_t>();
  }
  if (a.ptr != 0) {
    auto dev = api.value()->pointerDevice(reinterpret_cast<const void*>(a.ptr));
    if (!dev) throw py::value_error(what + ": " + dev.error().message);
    a.device = dev.value();
  }
  prepareDevice(a, io, slot, format, what, out);
  out.keep = py::reinterpret_borrow<py::object>(obj);
}

// Fills `out` from a Python array and an optional dtype override (see dump()'s docstring).
void prepareTensor(py::handle array, const std::optional<std::string>& dtype_override, Io io,
                   uint32_t slot, std::string_view format, const std::string& what,
                   PreparedTensor& out) {
  if (array.is_none()) throw py::type_error(what + " is None");
  if (py::isinstance<DeviceArray>(array)) {
    if (dtype_override) throw py::value_error(what + ": a DeviceArray carries its own dtype");
    prepareDevice(array.cast<const DeviceArray&>(), io, slot, format, what, out);
    out.keep = py::reinterpret_borrow<py::object>(array);
    return;
  }
  if (!PyObject_CheckBuffer(array.ptr()) && py::hasattr(array, "__cuda_array_interface__")) {
    prepareCudaInterface(array, dtype_override, io, slot, format, what, out);
    return;
  }
  out.buffer.acquire(array, what);
  const Py_buffer& v = out.buffer.view();
  const DType natural = dtypeOfBuffer(v, what);
  out.shape.clear();
  for (int i = 0; i < v.ndim; ++i) out.shape.push_back(static_cast<int64_t>(v.shape[i]));
  DType dtype = natural;
  if (dtype_override) {
    const std::optional<DType> want = dtypeFromName(*dtype_override);
    if (!want) {
      throw py::value_error(what + ": unknown dtype \"" + *dtype_override +
                            "\" (raw overrides: \"bfloat16\", \"int4\", \"uint1\")");
    }
    const std::string have(dtypeName(natural));
    auto mismatch = [&](const char* needs) {
      return py::value_error(what + ": dtype=\"" + *dtype_override + "\" needs " + needs +
                             " data, got " + have);
    };
    switch (*want) {
      case DType::kBFloat16:  // raw bfloat16 bit patterns
        if (natural != DType::kUInt16 && natural != DType::kInt16) {
          throw mismatch("uint16 or int16 (raw bfloat16 bits)");
        }
        break;
      case DType::kInt4:  // packed pairs, low nibble first
        if (natural != DType::kInt8 && natural != DType::kUInt8) {
          throw mismatch("int8 or uint8 (packed int4 pairs)");
        }
        if (out.shape.empty()) {
          throw py::value_error(what + ": dtype=\"int4\" needs at least one dimension " +
                                "(the last one holds packed pairs)");
        }
        out.shape.back() *= 2;
        break;
      case DType::kUInt1:
        if (natural != DType::kUInt8 && natural != DType::kBool) {
          throw mismatch("uint8 (one 0/1 value per byte)");
        }
        break;
      default:
        if (*want != natural) {
          throw py::value_error(what + ": dtype=\"" + *dtype_override + "\" does not match " +
                                "the array's dtype " + have +
                                " (only \"bfloat16\", \"int4\" and \"uint1\" reinterpret data)");
        }
    }
    dtype = *want;
  }
  out.tensor.io = io;
  out.tensor.slot = slot;
  out.tensor.dtype = dtype;
  out.tensor.shape = out.shape;
  out.tensor.data = v.buf;
  out.tensor.bytes = static_cast<uint64_t>(v.len);
  out.tensor.format = format;
}

// A placeholder for a tensor the pushed-down filter rejected: never read, only counted.
client::Tensor filteredTensor(Io io, uint32_t slot) {
  client::Tensor t;
  t.io = io;
  t.slot = slot;
  t.dtype = DType::kUInt8;
  return t;
}

// An op's list item: an array, an (array, dtype) pair, an (array, dtype, identity) triple,
// or None (slot skipped).
struct ItemRef {
  py::handle array;
  std::optional<std::string> dtype;
  uint64_t identity = 0;  // dump once (client::Tensor::identity)
};

std::optional<ItemRef> parseItem(py::handle item, const std::string& what) {
  if (item.is_none()) return std::nullopt;
  if (py::isinstance<py::tuple>(item)) {
    auto tuple = py::reinterpret_borrow<py::tuple>(item);
    if (tuple.size() != 2 && tuple.size() != 3) {
      throw py::type_error(what +
                           " must be an array, an (array, dtype) pair or an (array, dtype, "
                           "identity) triple, got a tuple of " +
                           std::to_string(tuple.size()));
    }
    ItemRef ref{tuple[0], std::nullopt};
    if (!tuple[1].is_none()) {
      if (!py::isinstance<py::str>(tuple[1])) {
        throw py::type_error(what + ": dtype must be a str such as \"bfloat16\", got " +
                             typeName(tuple[1]));
      }
      ref.dtype = tuple[1].cast<std::string>();
    }
    if (tuple.size() == 3 && !tuple[2].is_none()) {
      if (!py::isinstance<py::int_>(tuple[2])) {
        throw py::type_error(what + ": identity must be an int, got " + typeName(tuple[2]));
      }
      ref.identity = tuple[2].cast<uint64_t>();
    }
    return ref;
  }
  return ItemRef{item, std::nullopt};
}

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
  d["last_error"] = c.last_error;
  return d;
}

// ---------------------------------------------------------------------------------------------
// The Python-visible Client

class PyClient {
 public:
  static std::unique_ptr<PyClient> create(
      py::object config, std::optional<std::string> socket, std::optional<int64_t> rank,
      std::optional<int64_t> device, std::optional<int64_t> ring_bytes,
      std::optional<std::string> backpressure, std::optional<int64_t> device_staging_bytes,
      const std::string& cuda_fallback, bool dump_once, std::optional<std::string> ms_format) {
    client::Options o;
    o.dump_once = dump_once;
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
    o.producer_version = DUMPD_VERSION;
    Result<std::unique_ptr<client::Client>> c = [&] {
      py::gil_scoped_release nogil;
      return client::Client::connect(std::move(o));
    }();
    auto self = std::unique_ptr<PyClient>(new PyClient(unwrap(std::move(c))));
    self->cuda_fallback_ = cuda_fallback;
    return self;
  }

  const std::string& cudaFallback() const { return cuda_fallback_; }

  ~PyClient() {
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
    std::lock_guard<std::mutex> lock(mu_);
    client_.reset();
  }

  void setStep(int64_t iteration, int64_t graph_id) {
    const uint32_t it = toU32(iteration, "iteration");
    const uint32_t g = toU32(graph_id, "graph_id");
    unwrap(locked([&](client::Client& c) { return c.setStep(it, g); }));
  }

  void prepareCuda(int64_t device) {
    if (device < 0 || device > 1024) throw py::value_error("device must be a CUDA ordinal");
    unwrap(locked([&](client::Client& c) { return c.prepareDevice(static_cast<int>(device)); }));
  }

  bool shouldDump(const std::string& op_name, const std::string& io, bool marked) {
    const Io which = parseIo(io);
    return lockedFast([&](client::Client& c) { return c.shouldDump(op_name, which, marked); });
  }

  bool stepSelected() {
    return lockedFast([](client::Client& c) { return c.stepSelected(); });
  }

  bool dump(const std::string& op_type, const std::string& op_name, const std::string& io,
            int64_t slot, py::handle array, std::optional<std::string> dtype,
            const std::string& format, int64_t task_id, int64_t stream_id, bool marked,
            std::optional<uintptr_t> stream) {
    const Io which = parseIo(io);
    const uint32_t s = toU32(slot, "slot");
    client::OpCall op;
    op.op_type = op_type;
    op.op_name = op_name;
    op.task_id = toU32(task_id, "task_id");
    op.stream_id = toU32(stream_id, "stream_id");
    op.marked = marked;
    // Ask the filter before touching the data: a filtered tensor costs no buffer export.
    if (!lockedFast([&](client::Client& c) { return c.shouldDump(op_name, which, marked); })) {
      const client::Tensor t = filteredTensor(which, s);
      op.tensors = std::span(&t, 1);
      return unwrap(locked([&](client::Client& c) { return c.dumpOp(op); }));
    }
    PreparedTensor p;
    prepareTensor(array, dtype, which, s, format, "array", p);
    op.tensors = std::span(&p.tensor, 1);
    op.stream = reinterpret_cast<client::StreamHandle>(stream.value_or(p.cai_stream));
    return unwrap(locked([&](client::Client& c) { return c.dumpOp(op); }));
  }

  bool dumpOp(const std::string& op_type, const std::string& op_name, py::iterable inputs,
              py::iterable outputs, int64_t task_id, int64_t stream_id, bool marked,
              std::optional<uintptr_t> stream) {
    for (py::handle list : {inputs, outputs}) {
      // An array is iterable too: dump_op(..., outputs=y) would dump y's rows as slots.
      if (PyObject_CheckBuffer(list.ptr()) || py::hasattr(list, "__array__")) {
        throw py::type_error("inputs and outputs must be lists or tuples of arrays, got " +
                             typeName(list) + " (wrap a single array: outputs=[y])");
      }
    }
    client::OpCall op;
    op.op_type = op_type;
    op.op_name = op_name;
    op.task_id = toU32(task_id, "task_id");
    op.stream_id = toU32(stream_id, "stream_id");
    op.marked = marked;
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
            prepareTensor(ref->array, ref->dtype, io, slot, "DefaultFormat", what, p);
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

  void dumpConstant(const std::string& data_id, py::handle array, int64_t graph_id,
                    std::optional<std::string> dtype) {
    const uint32_t g = toU32(graph_id, "graph_id");
    PreparedTensor p;
    prepareTensor(array, dtype, Io::kOutput, 0, "DefaultFormat", "array", p);
    unwrap(locked([&](client::Client& c) { return c.dumpConstant(data_id, p.tensor, g); }));
  }

  void saveGraph(int64_t graph_id, std::optional<std::string> ir_text,
                 std::optional<py::bytes> pb) {
    const uint32_t g = toU32(graph_id, "graph_id");
    if (!ir_text && !pb) throw py::value_error("save_graph needs ir_text, pb_bytes or both");
    const std::string ir = ir_text.value_or("");
    const std::string pb_bytes = pb ? std::string(*pb) : std::string();
    unwrap(locked([&](client::Client& c) { return c.saveGraph(g, ir, pb_bytes); }));
  }

  void saveExecutionOrder(int64_t graph_id, py::iterable op_names) {
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

  void saveKernelArgs(const std::string& op_type, const std::string& op_name, py::dict args) {
    std::vector<std::pair<std::string, std::string>> kv;
    for (auto [k, v] : args) kv.emplace_back(py::str(k), py::str(v));
    unwrap(locked([&](client::Client& c) { return c.saveKernelArgs(op_type, op_name, kv); }));
  }

  py::dict flush(std::optional<double> timeout) {
    int ms = -1;
    if (timeout) {
      if (!(*timeout >= 0) || *timeout > 1e6) {
        throw py::value_error("timeout must be None or a number of seconds >= 0");
      }
      ms = static_cast<int>(std::ceil(*timeout * 1000.0));
    }
    return countsToDict(unwrap(locked([&](client::Client& c) { return c.flush(ms); })));
  }

  py::dict stats() {
    const client::Stats s = lockedFast([](client::Client& c) { return c.stats(); }, true);
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
    d["closed"] = closed_;
    return d;
  }

  void close(std::optional<double> timeout) {
    int ms = 30000;
    if (timeout) {
      if (!(*timeout >= 0) || *timeout > 1e6) {
        throw py::value_error("timeout must be None or a number of seconds >= 0");
      }
      ms = static_cast<int>(std::ceil(*timeout * 1000.0));
    }
    Status s = [&] {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return Status();
      closed_ = true;
      return client_->close(ms);
    }();
    unwrap(s);
  }

  bool closed() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

  uint32_t rank() { return client_->rank(); }
  uint32_t device() { return client_->device(); }
  std::string path() { return client_->plan().path; }
  std::string netName() { return client_->plan().net_name; }

 private:
  explicit PyClient(std::unique_ptr<client::Client> c) : client_(std::move(c)) {}

  // Runs f(client) with the mutex held and the GIL released; for calls that copy, block or
  // wait. Raises DaemonError on a closed client.
  template <typename F>
  auto locked(F&& f) -> decltype(f(std::declval<client::Client&>())) {
    bool was_closed = false;
    std::optional<decltype(f(std::declval<client::Client&>()))> r;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) {
        was_closed = true;
      } else {
        r.emplace(f(*client_));
      }
    }
    if (was_closed) raise(g_exc.daemon, "client is closed");
    return std::move(*r);
  }

  // Like locked() for short calls: keeps the GIL when the mutex is free, releases it only to
  // wait for the mutex (never blocks on the mutex while holding the GIL).
  template <typename F>
  auto lockedFast(F&& f, bool allow_closed = false)
      -> decltype(f(std::declval<client::Client&>())) {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
      py::gil_scoped_release nogil;
      lock.lock();
    }
    if (closed_ && !allow_closed) {
      lock.unlock();
      raise(g_exc.daemon, "client is closed");
    }
    return f(*client_);
  }

  std::mutex mu_;
  std::string cuda_fallback_ = "error";
  bool closed_ = false;  // guarded by mu_
  std::unique_ptr<client::Client> client_;
};

// Creates `name` in the module with the given bases and docstring.
py::handle makeException(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("dumpd.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // the module takes its own reference; ours is kept
  return py::handle(type);
}

constexpr const char* kClientDoc =
    R"doc(A connection to the node's dumpd daemon for one training process (one rank).

Client(config=None, socket=None, rank=None, device=None, ring_bytes=None, backpressure=None,
       *, device_staging_bytes=None, cuda_fallback="error", dump_once=True, ms_format=None)

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
  m.attr("__version__") = DUMPD_VERSION;

  py::handle exception_type(PyExc_Exception);
  g_exc.base = makeException(m, "DumpdError", py::make_tuple(exception_type),
                             "Base class of the errors raised by dumpd.");
  g_exc.config = makeException(m, "ConfigError", py::make_tuple(g_exc.base),
                               "The job config (data_dump.json) is missing or invalid; the "
                               "message is the validator's.");
  g_exc.daemon = makeException(m, "DaemonError", py::make_tuple(g_exc.base),
                               "No daemon answered, or the session failed (protocol or I/O "
                               "error, daemon gone, client closed).");
  g_exc.timeout = makeException(
      m, "DaemonTimeout", py::make_tuple(g_exc.daemon, py::handle(PyExc_TimeoutError)),
      "The daemon did not finish in time (flush timeout, or the block policy's wait for ring "
      "space timed out).");

  py::class_<DeviceArray>(m, "DeviceArray", kDeviceArrayDoc)
      .def(py::init(
               [](uint64_t ptr, std::vector<int64_t> shape, const std::string& dtype, int device) {
                 DeviceArray a;
                 a.ptr = ptr;
                 a.shape = std::move(shape);
                 a.dtype = parseDtypeName(dtype, "DeviceArray");
                 a.device = device;
                 for (int64_t d : a.shape) {
                   if (d < 0) throw py::value_error("DeviceArray: negative dimension");
                 }
                 if (device < 0) throw py::value_error("DeviceArray: negative device");
                 return a;
               }),
           py::arg("ptr"), py::arg("shape"), py::arg("dtype"), py::arg("device"))
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

  py::class_<PyClient>(m, "Client", kClientDoc)
      .def(py::init(&PyClient::create), py::arg("config") = py::none(),
           py::arg("socket") = py::none(), py::arg("rank") = py::none(),
           py::arg("device") = py::none(), py::arg("ring_bytes") = py::none(),
           py::arg("backpressure") = py::none(), py::kw_only(),
           py::arg("device_staging_bytes") = py::none(), py::arg("cuda_fallback") = "error",
           py::arg("dump_once") = true, py::arg("ms_format") = py::none())
      .def("set_step", &PyClient::setStep, py::arg("iteration"), py::arg("graph_id") = 0,
           "Marks the current iteration (and graph). Moving to a new step completes the previous "
           "one. Dumps are filtered by the config's \"iteration\" against this value.")
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
