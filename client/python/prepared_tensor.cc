#include "client/python/prepared_tensor.h"

#include "base/element_count.h"
#include "client/python/arguments.h"
#include "client/python/device_array.h"
#include "client/python/statistics_item.h"

namespace dumpd::python {
namespace {

// A device array's tensor.
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

}  // namespace

void prepareTensor(py::handle array, const std::optional<std::string>& dtype_override, Io io,
                   uint32_t slot, std::string_view format, const std::string& what,
                   PreparedTensor& out, bool strided_ok) {
  if (array.is_none()) throw py::type_error(what + " is None");
  if (py::isinstance<StatisticsItem>(array)) {
    if (dtype_override) throw py::value_error(what + ": a Statistics carries its own dtype");
    const auto& s = array.cast<const StatisticsItem&>();
    out.shape = s.shape;
    out.stats = s.stats;
    out.tensor.io = io;
    out.tensor.slot = slot;
    out.tensor.dtype = s.dtype;
    out.tensor.shape = out.shape;
    out.tensor.bytes = sourceBytes(s.dtype, s.stats.count);
    out.tensor.format = format;
    out.tensor.statistics = &out.stats;
    return;
  }
  if (py::isinstance<DeviceArray>(array)) {
    if (dtype_override) throw py::value_error(what + ": a DeviceArray carries its own dtype");
    prepareDevice(array.cast<const DeviceArray&>(), io, slot, format, what, out);
    out.keep = py::reinterpret_borrow<py::object>(array);
    return;
  }
  if (!PyObject_CheckBuffer(array.ptr()) && py::hasattr(array, "__cuda_array_interface__")) {
    const CudaInterfaceArray cai = readCudaInterface(array, dtype_override, what);
    out.cai_stream = cai.stream;
    prepareDevice(cai.array, io, slot, format, what, out);
    out.keep = py::reinterpret_borrow<py::object>(array);
    return;
  }
  // int4 doubles the last dimension (packed pairs): its strides would not describe it.
  out.buffer.acquire(array, what, strided_ok && dtype_override.value_or("") != "int4");
  const Py_buffer& v = out.buffer.view();
  const DType natural = dtypeOfBuffer(v, what);
  out.shape.clear();
  for (int i = 0; i < v.ndim; ++i) out.shape.push_back(static_cast<int64_t>(v.shape[i]));
  const DType dtype =
      dtype_override ? overrideBufferDtype(natural, *dtype_override, what, out.shape) : natural;
  out.tensor.io = io;
  out.tensor.slot = slot;
  out.tensor.dtype = dtype;
  out.tensor.shape = out.shape;
  out.tensor.data = v.buf;
  out.tensor.bytes = static_cast<uint64_t>(v.len);
  out.tensor.format = format;
  out.tensor.strides = out.buffer.strides();
}

client::Tensor filteredTensor(Io io, uint32_t slot) {
  client::Tensor t;
  t.io = io;
  t.slot = slot;
  t.dtype = DType::kUInt8;
  return t;
}

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

}  // namespace dumpd::python
