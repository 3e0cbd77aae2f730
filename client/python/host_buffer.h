// Host arrays: a Python object's memory as one C-contiguous buffer, and its dumpd dtype.
// REQUIRES: the GIL is held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace dumpd::python {

namespace py = pybind11;

// A view of a Python object's memory: C-contiguous, or (acquire(..., strided_ok=true)) with
// the exporter's strides, so a transposed or channels-last array is copied once, into the
// ring, instead of into a contiguous temporary first. Holds the exporter (and the contiguous
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
  void acquire(py::handle obj, const std::string& what, bool strided_ok = false);

  const Py_buffer& view() const { return view_; }
  // The byte strides of a view that is not C-contiguous; empty for a C-contiguous one.
  const std::vector<int64_t>& strides() const { return strides_; }

 private:
  void keepStrides();

  Py_buffer view_{};
  bool held_ = false;
  py::object copy_;
  std::vector<int64_t> strides_;
};

// The element type of a buffer from its struct-module format ("f", "<i8", "Zd", "?").
// TypeError for other formats, ValueError for big-endian data.
DType dtypeOfBuffer(const Py_buffer& v, const std::string& what);

// The dtype a buffer of dtype `natural` is dumped as under dump(..., dtype=`name`): the same
// dtype, or a raw reinterpretation ("bfloat16", "int4", "uint1") of matching data. For "int4"
// the last dimension of `shape` doubles (it holds packed pairs). ValueError otherwise.
DType overrideBufferDtype(DType natural, const std::string& name, const std::string& what,
                          std::vector<int64_t>& shape);

}  // namespace dumpd::python
