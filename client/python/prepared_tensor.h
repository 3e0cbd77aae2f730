// Python arguments of dump()/dump_op()/dump_constant() turned into client::Tensor
// descriptors: an op's list items, and each array (host buffer, DeviceArray, or
// __cuda_array_interface__ object). REQUIRES: the GIL is held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/io.h"
#include "client/client.h"
#include "client/python/host_buffer.h"
#include "ipc/ring_format.h"

namespace dumpd::python {

namespace py = pybind11;

// One tensor ready for Client::dumpOp: its buffer, logical shape, and descriptor (which points
// into the buffer and the shape, so a PreparedTensor never moves).
struct PreparedTensor {
  HeldBuffer buffer;
  std::vector<int64_t> shape;
  client::Tensor tensor;
  py::object keep;  // the device array's owner, alive until the op is enqueued
  // For __cuda_array_interface__ objects: the stream it names (0: none given).
  uintptr_t cai_stream = 0;
  // For dumpd.Statistics: the row tensor.statistics points at.
  ipc::StatsPayload stats{};
};

// Fills `out` from a Python array and an optional dtype override (see dump()'s docstring).
// strided_ok: a host array that is not C-contiguous keeps its strides (the client copies it
// in C order, in one pass, into the ring); otherwise it is made contiguous here first.
void prepareTensor(py::handle array, const std::optional<std::string>& dtype_override, Io io,
                   uint32_t slot, std::string_view format, const std::string& what,
                   PreparedTensor& out, bool strided_ok = false);

// A placeholder for a tensor the pushed-down filter rejected: never read, only counted.
client::Tensor filteredTensor(Io io, uint32_t slot);

// An op's list item: an array, an (array, dtype) pair, an (array, dtype, identity) triple,
// or None (slot skipped).
struct ItemRef {
  py::handle array;
  std::optional<std::string> dtype;
  uint64_t identity = 0;  // dump once (client::Tensor::identity)
};

// nullopt for None; TypeError for a tuple of another size or with a dtype or identity of the
// wrong type.
std::optional<ItemRef> parseItem(py::handle item, const std::string& what);

}  // namespace dumpd::python
