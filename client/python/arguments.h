// Checks and conversions of plain Python arguments, with the messages users see. Each raises
// ValueError (or TypeError) naming the argument. REQUIRES: the GIL is held.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/io.h"

namespace dumpd::python {

namespace py = pybind11;

// `what` must be in [0, 2**32).
uint32_t toU32(int64_t v, const char* what);

// "input" or "output".
Io parseIo(std::string_view io);

// A timeout in seconds (None: `none_ms`) as milliseconds, rounded up.
int timeoutMs(std::optional<double> timeout, int none_ms);

// The name of obj's type, for messages.
std::string typeName(py::handle obj);

}  // namespace dumpd::python
