// The package's exceptions (dumpd.DumpdError and its subclasses) and the one place C++ errors
// become Python ones. Everything here REQUIRES the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "base/result.h"

namespace dumpd::python {

namespace py = pybind11;

// Creates DumpdError, ConfigError, DaemonError and DaemonTimeout in `m`. Called once, at import;
// the module owns the types for the rest of the process.
void addExceptionTypes(py::module_& m);

// ConfigError for kInvalidConfig, ValueError for kInvalidArgument, DaemonTimeout for kTimeout,
// DaemonError for everything else.
[[noreturn]] void raiseError(const Error& e);

[[noreturn]] void raiseDaemonError(const std::string& message);

template <typename T>
T unwrap(Result<T>&& r) {
  if (!r) raiseError(r.error());
  return std::move(r).value();
}

inline void unwrap(const Status& s) {
  if (!s) raiseError(s.error());
}
// Preferred over the template for a Status temporary.
inline void unwrap(Status&& s) { unwrap(static_cast<const Status&>(s)); }

}  // namespace dumpd::python
