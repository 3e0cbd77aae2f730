#include "client/python/arguments.h"

#include <cmath>
#include <limits>

namespace dumpd::python {

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

int timeoutMs(std::optional<double> timeout, int none_ms) {
  if (!timeout) return none_ms;
  // Written so that NaN fails too; 1e6 s keeps the milliseconds inside an int.
  if (!(*timeout >= 0) || *timeout > 1e6) {
    throw py::value_error("timeout must be None or a number of seconds >= 0");
  }
  return static_cast<int>(std::ceil(*timeout * 1000.0));
}

std::string typeName(py::handle obj) { return py::str(py::type::handle_of(obj).attr("__name__")); }

}  // namespace dumpd::python
