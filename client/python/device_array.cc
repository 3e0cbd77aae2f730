#include "client/python/device_array.h"

#include <utility>

#include "client/device_api.h"
#include "client/python/errors.h"

namespace dumpd::python {
namespace {

DType parseDtypeName(const std::string& name, const std::string& what) {
  const std::optional<DType> t = dtypeFromName(name);
  if (!t) throw py::value_error(what + ": unknown dtype \"" + name + "\"");
  return *t;
}

}  // namespace

DeviceArray makeDeviceArray(uint64_t ptr, std::vector<int64_t> shape, const std::string& dtype,
                            int device) {
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
}

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

CudaInterfaceArray readCudaInterface(py::handle obj,
                                     const std::optional<std::string>& dtype_override,
                                     const std::string& what) {
  py::dict cai = obj.attr("__cuda_array_interface__");
  CudaInterfaceArray out;
  DeviceArray& a = out.array;
  py::tuple data = cai["data"];
  a.ptr = data[0].cast<uint64_t>();
  for (py::handle d : py::tuple(cai["shape"])) a.shape.push_back(d.cast<int64_t>());
  const std::string typestr = cai["typestr"].cast<std::string>();
  std::optional<DType> natural = dtypeOfTypestr(typestr);
  // torch exports bfloat16 as raw 2-byte records ("<V2"): its own dtype says what they are.
  if (!natural && typestr.size() == 3 && typestr.substr(1) == "V2" && py::hasattr(obj, "dtype") &&
      py::str(obj.attr("dtype")).cast<std::string>() == "torch.bfloat16") {
    natural = DType::kBFloat16;
  }
  if (!natural)
    throw py::type_error(what + ": unsupported __cuda_array_interface__ typestr " + typestr);
  a.dtype = *natural;
  if (dtype_override) {
    const DType want = parseDtypeName(*dtype_override, what);
    if (want != DType::kBFloat16 ||
        (a.dtype != DType::kInt16 && a.dtype != DType::kUInt16 && a.dtype != DType::kBFloat16)) {
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
    out.stream = cai["stream"].cast<uintptr_t>();
  }
  auto api = client::cudaDevice();
  if (!api) raiseError(api.error());
  if (out.stream == 0 && py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_cuda")) {
    // A torch tensor names no stream in its interface: its producer is torch's current
    // stream, which may be a side stream.
    py::object torch_cuda = py::module_::import("torch.cuda");
    py::object device = obj.attr("device");
    out.stream = torch_cuda.attr("current_stream")(device).attr("cuda_stream").cast<uintptr_t>();
  }
  if (a.ptr != 0) {
    auto dev = api.value()->pointerDevice(reinterpret_cast<const void*>(a.ptr));
    if (!dev) throw py::value_error(what + ": " + dev.error().message);
    a.device = dev.value();
  }
  return out;
}

}  // namespace dumpd::python
