#include "client/python/errors.h"

namespace dumpd::python {
namespace {

// Raw handles: the module holds the references, and they must never be decref'd at process
// exit (the interpreter may be gone by then).
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

// Creates `name` in the module with the given bases and docstring.
py::handle makeException(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("dumpd.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));  // the module takes its own reference; ours is kept
  return py::handle(type);
}

}  // namespace

void addExceptionTypes(py::module_& m) {
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
}

void raiseError(const Error& e) {
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

void raiseDaemonError(const std::string& message) { raise(g_exc.daemon, message); }

}  // namespace dumpd::python
