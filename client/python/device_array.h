// Arrays in CUDA device memory, given by pointer: dumpd.DeviceArray, and objects with
// __cuda_array_interface__ (cupy, numba, torch). REQUIRES: the GIL is held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"

namespace dumpd::python {

namespace py = pybind11;

// A C-contiguous array in CUDA device memory, described by pointer (dumpd.DeviceArray, which
// dumpd.torch builds from a torch tensor). The caller keeps the memory alive until the op's
// stream has run past the dump (a caching allocator does).
struct DeviceArray {
  uint64_t ptr = 0;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  int device = 0;
};

// DeviceArray(ptr, shape, dtype, device) as Python calls it. ValueError for an unknown dtype
// name, a negative dimension or device.
DeviceArray makeDeviceArray(uint64_t ptr, std::vector<int64_t> shape, const std::string& dtype,
                            int device);

// DType of a __cuda_array_interface__ typestr ("<f4", "|b1", "<i8", ...).
std::optional<DType> dtypeOfTypestr(std::string_view ts);

// An object's __cuda_array_interface__, read and checked.
struct CudaInterfaceArray {
  DeviceArray array;
  uintptr_t stream = 0;  // the stream the producer names (0: none given)
};

// Reads `obj.__cuda_array_interface__`: the only dtype override is "bfloat16" over 16-bit
// integers, strides must be C-contiguous. An interface that names no stream on a torch tensor
// takes torch's current stream of its device. Raises DaemonError when CUDA cannot be used here
// (before touching the pointer), TypeError/ValueError for what cannot be dumped.
CudaInterfaceArray readCudaInterface(py::handle obj,
                                     const std::optional<std::string>& dtype_override,
                                     const std::string& what);

}  // namespace dumpd::python
