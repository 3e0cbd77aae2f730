// dumpd.Client: the Python face of one dumpd::client::Client.
//
// Threading rule: the C++ Client is single-threaded, so every call takes the binding's mutex.
// A thread never blocks on that mutex while holding the GIL (it releases the GIL first), and
// the mutex holder never needs the GIL, so the two locks cannot deadlock. Tensor copies,
// commits, backpressure waits and flushes all run with the GIL released.
//
// Zero-copy contract: a C-contiguous buffer is copied once, from the caller's memory straight
// into the shared-memory ring. Only a non-contiguous array is first made contiguous (numpy).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "client/client.h"

namespace dumpd::python {

namespace py = pybind11;

// One method per Python method or property of dumpd.Client (dumpd_module.cc names them and
// holds their docstrings). Once closed, every call that goes to the C++ Client raises
// DaemonError; close() is idempotent, and stats() and the properties still answer.
class PyClient {
 public:
  static std::unique_ptr<PyClient> create(
      py::object config, std::optional<std::string> socket, std::optional<int64_t> rank,
      std::optional<int64_t> device, std::optional<int64_t> ring_bytes,
      std::optional<std::string> backpressure, std::optional<int64_t> device_staging_bytes,
      const std::string& cuda_fallback, bool dump_once, std::optional<std::string> ms_format,
      py::object flight_recorder, bool host_statistics);

  ~PyClient();

  const std::string& cudaFallback() const { return cuda_fallback_; }

  void setStep(int64_t iteration, int64_t graph_id);
  void trigger(const std::string& reason);
  void reportLoss(double loss);
  void reportReplicaMismatch(uint32_t iteration, const std::string& tensor,
                             const std::vector<uint32_t>& ranks,
                             const std::vector<uint64_t>& digests);
  void prepareCuda(int64_t device);
  bool shouldDump(const std::string& op_name, const std::string& io, bool marked);
  bool stepSelected();
  bool statisticsOnly();
  std::optional<uint32_t> replicaEvery();
  bool dump(const std::string& op_type, const std::string& op_name, const std::string& io,
            int64_t slot, py::handle array, std::optional<std::string> dtype,
            const std::string& format, int64_t task_id, int64_t stream_id, bool marked,
            std::optional<uintptr_t> stream);
  bool dumpOp(const std::string& op_type, const std::string& op_name, py::iterable inputs,
              py::iterable outputs, int64_t task_id, int64_t stream_id, bool marked,
              std::optional<uintptr_t> stream);
  void dumpConstant(const std::string& data_id, py::handle array, int64_t graph_id,
                    std::optional<std::string> dtype);
  void saveGraph(int64_t graph_id, std::optional<std::string> ir_text, std::optional<py::bytes> pb);
  void saveExecutionOrder(int64_t graph_id, py::iterable op_names);
  void saveKernelArgs(const std::string& op_type, const std::string& op_name, py::dict args);
  py::dict flush(std::optional<double> timeout);
  py::dict stats();
  void close(std::optional<double> timeout);
  bool closed();

  uint32_t rank() { return client_->rank(); }
  uint32_t device() { return client_->device(); }
  std::string path() { return client_->path(); }
  std::string netName() { return client_->netName(); }

 private:
  explicit PyClient(std::unique_ptr<client::Client> c) : client_(std::move(c)) {}

  // Runs f(client) with the mutex held and the GIL released; for calls that copy, block or
  // wait. Raises DaemonError on a closed client.
  template <typename F>
  auto locked(F&& f) -> decltype(f(std::declval<client::Client&>()));

  // Takes mu_ keeping the GIL when it is free; releases the GIL only to wait for it.
  void lockKeepingGil() ACQUIRE(mu_);
  // Like locked() for short calls: keeps the GIL when the mutex is free, releases it only to
  // wait for the mutex (never blocks on the mutex while holding the GIL). `allow_closed`: runs
  // f on a closed client too.
  template <typename F>
  auto lockedFast(F&& f, bool allow_closed = false) -> decltype(f(std::declval<client::Client&>()));

  Mutex mu_;
  std::string cuda_fallback_ = "error";
  bool closed_ GUARDED_BY(mu_) = false;
  std::unique_ptr<client::Client> client_;
};

}  // namespace dumpd::python
