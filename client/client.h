// dumpd's producer library: a training process streams op inputs/outputs to the node's dumpd.
//
// Threading rule: a Client is used by one thread at a time (it owns a single-producer ring).
// Calls from several threads must be serialised by the caller (the Python binding does).
//
// Memory-reuse contract: when dumpOp()/commitOp() returns, a host tensor's bytes are in
// shared memory, and a CUDA tensor's bytes are snapshotted by work enqueued on the op's
// stream; the caller may overwrite or free its buffers at once (for CUDA memory: by work
// ordered after that stream, which is what a framework's caching allocator does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/io.h"

namespace dumpd::ipc {
struct StatsPayload;  // ipc/ring_format.h
}  // namespace dumpd::ipc
#include "base/result.h"
#include "client/device_api.h"
#include "ipc/backpressure.h"

namespace dumpd::client {

struct Options {
  std::string socket_path;  // "" -> $DUMPD_SOCKET, else /run/dumpd/dumpd.sock
  std::string config_path;  // "" -> $MINDSPORE_DUMP_CONFIG (unless config_text is set)
  std::optional<std::string> config_text;         // the job config itself, instead of a path
  std::optional<uint32_t> rank;                   // default $RANK_ID, else 0
  std::optional<uint32_t> device;                 // default $DEVICE_ID, else 0
  uint64_t ring_bytes = 0;                        // 0 -> 64 MiB
  std::optional<ipc::Backpressure> backpressure;  // default: the daemon's setting
  std::string producer_name = "dumpd-cpp";
  std::string producer_version;  // written as ms_version in .dump_metadata/config.json
  std::string device_target = "CPU";
  // The MindSpore generation the dump tree matches: "2.6" (released layout) or "2.7" (newer
  // writer); "" -> $DUMPD_MS_FORMAT, else "2.6". See docs/compatibility.md.
  std::string ms_format;
  int connect_timeout_ms = 10000;
  // Device tensors: bytes of device memory per GPU for snapshots in flight (0: copy
  // device-to-host on the producer's stream, no snapshot buffer). See docs/configuration.md.
  uint64_t device_staging_bytes = 1ull << 30;
  // Dump each tensor once: a tensor whose Tensor::identity repeats one already dumped in the
  // step is sent as a reference to it (dumpOp only). Off: every tensor ships its bytes.
  bool dump_once = true;
  // A host tensor of which only statistics are written (saved_data "statistic"
  // without md5/sha1, or a step a "statistic" flight recorder keeps): true, this process
  // computes them (dumpOp) and 96 bytes cross the ring; false, its bytes cross and dumpd
  // computes them. The same rule either way (docs/performance.md).
  bool host_statistics = true;
  // The flight recorder (JSON text of the job config's "flight_recorder" section, a dumpd
  // extension: docs/recorder.md). Set, it replaces the file's section; the job config the
  // daemon receives (and keeps in .dump_metadata/) is then the file with that section.
  std::optional<std::string> flight_recorder;
  // The device implementation; nullptr: CUDA, created at the first CUDA tensor. Tests pass
  // a fake one.
  std::shared_ptr<DeviceApi> device_api;
};

// Where a tensor's bytes live.
enum class Memory : uint8_t { kHost, kCuda };

// One tensor of an op execution. `data` holds sourceBytes(dtype, elements) bytes
// (int4: packed pairs, low nibble first; bfloat16: raw 16-bit patterns).
struct Tensor {
  Io io = Io::kOutput;
  uint32_t slot = 0;
  DType dtype = DType::kFloat32;
  std::span<const int64_t> shape;
  const void* data = nullptr;
  uint64_t bytes = 0;
  std::string_view format = "DefaultFormat";
  Memory memory = Memory::kHost;
  int device = 0;  // CUDA device ordinal of `data` when memory is kCuda
  // Host tensors only: the byte stride of each dimension of `shape` (any sign, 0 for a
  // broadcast dimension), for a tensor that is not C-contiguous (a transposed view, a
  // channels-last buffer, a slice); it is copied into the ring in C order in one pass. A
  // dump-once repeat must have the same strides. Empty: C-contiguous. `bytes` is still the
  // C-ordered size (sourceBytes of the shape).
  std::span<const int64_t> strides;
  // Dump once (Options::dump_once): nonzero names the tensor's current contents. Within one
  // step (setStep), tensors given the same identity must hold the same bytes, dtype and
  // shape at the same address; all but the first are sent as references to it (the daemon
  // links its file). 0: always send the bytes. The caller must change the identity when the
  // contents change (torch: the tensor's version counter does).
  uint64_t identity = 0;
  // The tensor's statistics, computed by the caller where the tensor is (a compiled graph:
  // dumpd.torch), sent in place of its bytes: `data` is not read, `bytes` is still the size
  // of `shape` and `dtype`, and `count` must be its element count. Plain sums (no
  // kStatsAverage). Only for a job that writes nothing but statistics of this tensor
  // (Client::statisticsOnly()); dumpOp only. Else kInvalidArgument naming the slot.
  const ipc::StatsPayload* statistics = nullptr;
};

struct OpCall {
  std::string_view op_type;  // primitive name ("Conv2D")
  std::string_view op_name;  // full scope name ("Default/conv1-Conv2d/Conv2D-op3")
  std::span<const Tensor> tensors;
  uint32_t task_id = 0;
  uint32_t stream_id = 0;
  bool marked = false;  // set_dump mark, for dump_mode 2
  // The cudaStream_t that produced the op's CUDA tensors (nullptr: the default stream).
  // Their snapshot is enqueued on it; nothing here waits for it.
  StreamHandle stream = nullptr;
};

struct Counts {
  uint64_t records = 0;
  uint64_t tensors_received = 0;
  uint64_t tensors_written = 0;
  uint64_t tensors_dropped = 0;
  uint64_t tensors_failed = 0;
  uint64_t bytes_written = 0;
  uint64_t tensors_filtered = 0;
  uint64_t tensors_linked = 0;  // of tensors_written: dump once, linked from a repeated tensor
  // No file by MindSpore's rules: zero-element tensors, ops without an overflow in overflow
  // mode. tensors_received = written + dropped + failed + filtered + skipped.
  uint64_t tensors_skipped = 0;
  std::string last_error;
};

struct Stats {
  uint64_t records_committed = 0;  // records in the ring
  uint64_t tensors_committed = 0;
  uint64_t bytes_committed = 0;   // payload bytes copied into the ring
  uint64_t tensors_filtered = 0;  // skipped by the pushed-down filter (no copy)
  uint64_t tensors_dropped = 0;   // drop policy: ring full
  uint64_t records_dropped = 0;
  uint64_t blocked_waits = 0;  // times the block policy waited for space
  uint64_t ring_capacity = 0;
  uint64_t ring_used = 0;
  uint32_t iteration = 0;
  uint32_t graph_id = 0;
  uint64_t session_id = 0;
  // Device tensors (see DevicePipeline).
  uint64_t device_records = 0;         // records whose tensors came from a device
  uint64_t device_records_staged = 0;  // of which snapshotted into device staging
  uint64_t device_staging_waits = 0;   // times a producer stream waited for staging space
  uint64_t device_records_failed = 0;  // voided because a device copy failed
  uint64_t device_in_flight = 0;       // records whose copies have not completed yet
  uint64_t device_statistics = 0;      // tensors whose statistics the device computed
  uint64_t host_statistics = 0;        // host tensors whose statistics this client computed
  uint64_t given_statistics = 0;       // tensors whose statistics the caller gave (compiled)
  // Flight recorder: records kept on the device (no device-to-host copy), of which copied
  // to the host when the daemon fetched them, and held snapshots given up for staging space.
  uint64_t device_records_deferred = 0;
  uint64_t device_records_fetched = 0;
  uint64_t device_records_released = 0;
  uint64_t tensors_deduplicated = 0;  // sent as a reference to an earlier tensor (dump once)
  // Where the producer thread's time goes (nanoseconds, summed): dumpOp calls with a selected
  // tensor; of that, handing device tensors to the pipeline; of that, the device runtime
  // calls that enqueue kernels, copies and events, and waiting for the issuer (staging).
  uint64_t dump_ns = 0;
  uint64_t device_submit_ns = 0;
  uint64_t device_enqueue_ns = 0;
  uint64_t device_wait_ns = 0;
};

// A zero-copy reservation: write each tensor's bytes at payload(i), then commitOp().
class Reservation {
 public:
  std::span<std::byte> payload(size_t i) const { return payloads_[i]; }
  size_t size() const { return payloads_.size(); }
  bool active() const { return active_; }

 private:
  friend class Client;
  std::vector<std::span<std::byte>> payloads_;
  uint32_t tensors_ = 0;
  uint64_t bytes_ = 0;
  bool active_ = false;
};

class Client {
 public:
  // Reads and validates the job config (ErrorCode::kInvalidConfig with the validator's
  // message), creates and pre-faults the ring, opens the dump root, and performs the
  // Hello/Welcome handshake (ErrorCode::kUnavailable when no daemon answers).
  static Result<std::unique_ptr<Client>> connect(Options options);
  // Flushes (bounded wait) and says Goodbye.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sets up CUDA device `device` for dumps now (pins the ring, allocates device staging,
  // creates the copy stream) instead of at its first CUDA tensor, which would pay for it.
  Status prepareDevice(int device);

  // Marks the current iteration and graph. Moving to a new step completes the previous one
  // (the daemon writes its manifest line). Default step: initial_iteration, graph 0.
  Status setStep(uint32_t iteration, uint32_t graph_id = 0);
  // Flight recorder (Options::flight_recorder, docs/recorder.md). trigger(): the daemon
  // writes the iterations it keeps (a "manual" trigger; `reason` is journalled, 1024 bytes
  // at most). reportLoss(): this step's loss, for the "loss_spike" trigger. Both travel in
  // the ring in order with the tensors; without a recorder the daemon ignores them.
  Status trigger(std::string_view reason);
  Status reportLoss(double loss);
  // Replica fingerprints (docs/replicas.md): the replicas of `tensor` in `iteration` differ;
  // `ranks` (group ranks) differ from the majority; `digests`: every rank's, in group rank
  // order. The daemon journals it (.dump_metadata/replicas.jsonl), shows it in status, and
  // its flight recorder fires a "replica_mismatch" trigger. Every rank of the group reports it.
  struct ReplicaMismatch {
    uint32_t iteration = 0;
    std::string_view tensor;
    std::span<const uint32_t> ranks;
    std::span<const uint64_t> digests;
  };
  Status reportReplicaMismatch(const ReplicaMismatch& m);
  // The pushed-down filter: false means dumpOp would skip this tensor (and copy nothing).
  bool shouldDump(std::string_view op_name, Io io, bool marked = false);
  // True when the current step and device are selected at all (cheap per-step gate).
  bool stepSelected() const;
  // True when the job writes nothing but statistics of any tensor (saved_data "statistic"
  // without md5/sha1, and a flight recorder, if any, in "statistic" mode): Tensor::statistics
  // may stand in for a tensor's bytes. Fixed for the client's life.
  bool statisticsOnly() const;
  // The replica check period an operator set (dumpctl control --replica-every), applied at a
  // step mark like every runtime change; 0 while none was set (docs/replicas.md).
  uint32_t replicaEvery() const;

  // Copies the op's selected tensors into the ring as one record. Returns true when a
  // record was committed (or, with CUDA tensors, enqueued: it is committed when its device
  // copies complete), false when everything was filtered or dropped (drop policy). The CUDA
  // tensors of one op must live on one device.
  Result<bool> dumpOp(const OpCall& op);
  // Zero-copy form (host memory only): reserves ring space for the op's selected tensors
  // (data pointers are ignored; `bytes` must be set). An inactive reservation means
  // filtered/dropped.
  Result<Reservation> reserveOp(const OpCall& op);
  Result<uint64_t> commitOp(Reservation& r);

  Status dumpConstant(std::string_view data_id, const Tensor& tensor, uint32_t graph_id = 0);
  Status saveGraph(uint32_t graph_id, std::string_view ir_text, std::string_view pb_bytes);
  Status saveExecutionOrder(uint32_t graph_id, const std::vector<std::string>& op_names);
  Status saveKernelArgs(std::string_view op_type, std::string_view op_name,
                        const std::vector<std::pair<std::string, std::string>>& args);

  // Blocks until everything dumped so far is on disk, dropped or failed, device copies in
  // flight included (timeout_ms -1: no limit). Returns the session's cumulative counts from
  // the daemon.
  Result<Counts> flush(int timeout_ms = -1);
  Stats stats() const;
  // Flushes, says Goodbye and waits (within timeout_ms) until the daemon has finished the
  // session, manifest included; then closes. Further calls fail. Idempotent.
  Status close(int timeout_ms = 30000);

  // The job's dump root (the config's "path") and net_name.
  const std::string& path() const;
  const std::string& netName() const;
  uint32_t rank() const;
  uint32_t device() const;

 private:
  struct Impl;  // client/client_impl.h

  explicit Client(std::unique_ptr<Impl> impl);
  // Plans and reserves the record of `op`, which the caller checked is selected and the
  // client alive: each tensor's own selection (input_output) is asked once, by planOp.
  Result<Reservation> reserve(const OpCall& op, bool dump_once);
  std::unique_ptr<Impl> impl_;
};

// The client library's version (the package version: "0.2.0"), for a consumer that links
// the shared library to check what it got at run time.
const char* libraryVersion();

}  // namespace dumpd::client
