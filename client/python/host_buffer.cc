#include "client/python/host_buffer.h"

#include <optional>
#include <string_view>

#include "client/python/arguments.h"

namespace dumpd::python {

namespace {

// A strided view (no indirection), or false with no error set.
bool getStrided(PyObject* obj, Py_buffer& view) {
  if (PyObject_GetBuffer(obj, &view, PyBUF_STRIDES | PyBUF_FORMAT) == 0) return true;
  PyErr_Clear();
  return false;
}

}  // namespace

void HeldBuffer::acquire(py::handle obj, const std::string& what, bool strided_ok) {
  constexpr int kFlags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
  if (PyObject_CheckBuffer(obj.ptr())) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, kFlags) == 0) {
      held_ = true;
      return;
    }
    PyErr_Clear();  // not C-contiguous (or not exportable as such)
    if (strided_ok && getStrided(obj.ptr(), view_)) {
      held_ = true;
      keepStrides();
      return;
    }
  } else if (!py::hasattr(obj, "__array__") && !py::hasattr(obj, "__array_interface__")) {
    throw py::type_error(what + " must be a numpy array or an object with the buffer " +
                         "protocol, got " + typeName(obj));
  }
  py::object numpy = py::module_::import("numpy");
  if (strided_ok) {  // an array-like: numpy's view of it, as it is laid out
    py::object array = numpy.attr("asarray")(obj);
    if (PyObject_CheckBuffer(array.ptr()) && getStrided(array.ptr(), view_)) {
      copy_ = std::move(array);
      held_ = true;
      keepStrides();
      return;
    }
  }
  copy_ = numpy.attr("ascontiguousarray")(obj);
  if (PyObject_GetBuffer(copy_.ptr(), &view_, kFlags) != 0) {
    PyErr_Clear();
    std::string dtype =
        py::hasattr(copy_, "dtype") ? std::string(py::str(copy_.attr("dtype"))) : typeName(obj);
    throw py::type_error(what + ": unsupported dtype " + dtype);
  }
  held_ = true;
}

void HeldBuffer::keepStrides() {
  strides_.clear();
  if (view_.strides == nullptr || PyBuffer_IsContiguous(&view_, 'C') != 0) return;
  strides_.assign(view_.strides, view_.strides + view_.ndim);
}

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

DType overrideBufferDtype(DType natural, const std::string& name, const std::string& what,
                          std::vector<int64_t>& shape) {
  const std::optional<DType> want = dtypeFromName(name);
  if (!want) {
    throw py::value_error(what + ": unknown dtype \"" + name +
                          "\" (raw overrides: \"bfloat16\", \"int4\", \"uint1\")");
  }
  const std::string have(dtypeName(natural));
  auto mismatch = [&](const char* needs) {
    return py::value_error(what + ": dtype=\"" + name + "\" needs " + needs + " data, got " + have);
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
      if (shape.empty()) {
        throw py::value_error(what + ": dtype=\"int4\" needs at least one dimension " +
                              "(the last one holds packed pairs)");
      }
      shape.back() *= 2;
      break;
    case DType::kUInt1:
      if (natural != DType::kUInt8 && natural != DType::kBool) {
        throw mismatch("uint8 (one 0/1 value per byte)");
      }
      break;
    default:
      if (*want != natural) {
        throw py::value_error(what + ": dtype=\"" + name + "\" does not match " +
                              "the array's dtype " + have +
                              " (only \"bfloat16\", \"int4\" and \"uint1\" reinterpret data)");
      }
  }
  return *want;
}

}  // namespace dumpd::python
