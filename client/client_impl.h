// Client's state and the record-building steps its methods share (client/client.h); internal
// to dumpd_client. Client's methods are in client.cc, its connection set-up (Hello/Welcome) in
// client_connect.cc.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/element_count.h"
#include "client/client.h"
#include "client/device_pipeline.h"
#include "client/dump_once.h"
#include "client/op_plan.h"
#include "config/dump_plan.h"
#include "config/filter.h"
#include "ipc/control_codec.h"
#include "ipc/frame.h"
#include "ipc/op_codec.h"
#include "ipc/shm_ring.h"
#include "ipc/socket_io.h"
#include "proto/dumpd.pb.h"

namespace dumpd::client {

// How long one wait for ring space lasts before the daemon's liveness is checked again.
inline constexpr int kLivenessSliceMs = 200;

struct Client::Impl {
  Options options;
  config::DumpPlan plan;
  // Runtime control (dumpctl control): the last SelectionUpdate applied, and one received
  // but not yet applied (at the next step mark).
  uint64_t selection_generation = 0;
  bool paused = false;
  bool recorder_on = true;
  uint32_t replica_every = 0;  // dumpctl control --replica-every; 0: not set
  std::optional<v1::SelectionUpdate> pending_selection;
  std::optional<config::Filter> filter;
  uint32_t rank = 0;
  uint32_t device = 0;
  std::optional<ipc::RingProducer> ring;
  UniqueFd sock;
  ipc::FrameDecoder decoder;
  ipc::Backpressure backpressure = ipc::Backpressure::kBlock;
  int block_timeout_ms = -1;
  uint64_t session_id = 0;
  uint32_t iteration = 0;
  uint32_t graph_id = 0;
  bool step_marked = false;  // a step mark was sent: the first set_step(0) must send one too
  bool step_selected = true;
  // The flight recorder records this step (the job does not select it) and keeps its CUDA
  // tensors on the device until a fetch (saved_data other than "statistic", staging on).
  bool defer_step = false;
  // The job saves statistics only: CUDA tensors send theirs, computed on the device.
  bool device_statistics = false;
  // The same for contiguous host tensors: this client computes theirs (Options::host_statistics).
  bool host_statistics = false;
  bool closed = false;
  std::string fatal;  // set once the daemon ended the session
  uint64_t flush_token = 0;
  Stats stats;
  // Reused per call so the hot path does not allocate once warm.
  OpPlan op;  // the op reserve() is writing: what Client::dumpOp then copies
  std::vector<std::byte*> payloads;
  std::vector<std::byte*> descriptors;  // each tensor's TensorDesc::io byte in the ring
  std::vector<int64_t> shape_scratch;
  std::vector<DeviceCopy> device_copies;
  // Dump once: what this step sent, and this op's references (spec index -> target; a
  // target sequence of 0 is a tensor of the record being built).
  DumpOnceTable once;
  struct SameRef {
    size_t spec;
    DumpOnceTable::Ref target;
  };
  std::vector<SameRef> same_refs;
  std::vector<size_t> memo_specs;
  // A strided host tensor in C order, for its statistics (writeHostStatistics); grows to the
  // largest one (at most kStridedStatisticsBytes) and is kept.
  std::vector<std::byte> statistics_scratch;
  // Device tensors: created at the first one. Declared after `ring`: destroyed first (it
  // unpins the ring and must wait for copies into it).
  std::unique_ptr<DevicePipeline> pipeline;

  Status ensurePipeline() {
    if (pipeline) return {};
    std::shared_ptr<DeviceApi> api = options.device_api;
    if (!api) {
      auto cuda = cudaDevice();
      if (!cuda) return cuda.error();
      api = cuda.value();
    }
    pipeline = std::make_unique<DevicePipeline>(api, *ring, options.device_staging_bytes);
    return {};
  }

  // Checks the op's selected CUDA tensors: all on one device, with data. Returns that device
  // (-1 when the op has no CUDA tensor).
  Result<int> opDevice(const OpCall& op) const {
    int device = -1;
    for (const Tensor& t : op.tensors) {
      if (t.memory != Memory::kCuda || !filter->ioSelected(t.io)) continue;
      if (t.data == nullptr && t.bytes != 0) {
        return makeError(ErrorCode::kInvalidArgument, "CUDA tensor slot " + std::to_string(t.slot) +
                                                          " of " + std::string(op.op_name) +
                                                          " has no data pointer");
      }
      if (device >= 0 && t.device != device) {
        return makeError(ErrorCode::kInvalidArgument,
                         "the CUDA tensors of " + std::string(op.op_name) + " live on devices " +
                             std::to_string(device) + " and " + std::to_string(t.device) +
                             "; dump them as separate ops");
      }
      device = t.device;
    }
    return device;
  }

  // Dump once: makes spec i of the op being reserved a reference when its tensor repeats one
  // sent this step or earlier in this op; else flags it to be remembered (kMemoBit).
  void markRepeat(size_t i) {
    const Tensor& t = *op.selected[i];
    ipc::TensorSpec& s = op.specs[i];
    std::optional<DumpOnceTable::Ref> target = once.find(t);
    for (size_t j = 0; !target && j < memo_specs.size(); ++j) {  // twice in one op: x + x
      if (DumpOnceTable::sameTensor(*op.selected[memo_specs[j]], t)) {
        target = DumpOnceTable::Ref{0, static_cast<uint32_t>(memo_specs[j])};
      }
    }
    if (target) {
      s.payload = ipc::PayloadKind::kSame;
      s.data_bytes = sizeof(ipc::SamePayload);
      same_refs.push_back({i, *target});
    } else if (once.canRemember(memo_specs.size())) {
      s.memo = true;
      memo_specs.push_back(i);
    }
  }

  void updateStepSelected() {
    // With a flight recorder every iteration's selected ops are copied: the daemon keeps
    // those the job does not select (docs/recorder.md).
    const bool recording = plan.flight_recorder.has_value() && recorder_on;
    const bool dumped = !paused && filter->iterationSelected(iteration);
    step_selected = filter->deviceSelected(device) && (recording || dumped);
    defer_step = recording && !dumped && options.device_staging_bytes != 0 &&
                 plan.flight_recorder->saved_data != config::SavedData::kStatistic;
  }

  // Whether the op's selected CUDA tensors are kept on the device (docs/recorder.md): a
  // recorded step that no fetch of the daemon covers yet, every such tensor with statistics
  // (the NaN check needs them), and small enough to hold in staging.
  bool defersOp(const OpCall& op) const {
    if (!defer_step || !pipeline) return false;
    const ipc::RingControl* ctl = ring->control();
    // Relaxed: a stale value only defers a record the pipeline then fills for this fetch.
    if (ctl->fetch_generation.load(std::memory_order_relaxed) != 0 &&
        iteration <= ctl->fetch_through_iteration.load(std::memory_order_relaxed)) {
      return false;
    }
    uint64_t bytes = 0;
    for (const Tensor& t : op.tensors) {
      if (t.memory != Memory::kCuda || t.bytes == 0 || !filter->ioSelected(t.io)) continue;
      if (t.dtype == DType::kComplex64 || t.dtype == DType::kComplex128) return false;
      bytes += t.bytes;
    }
    return bytes != 0 && pipeline->holds(bytes);
  }

  // The operator's change the daemon sent (dumpctl control), from this step on. The step mark
  // sent next names its generation, so the daemon switches at the same record.
  void applySelection() {
    if (!pending_selection) return;
    const v1::SelectionUpdate& u = *pending_selection;
    // The daemon checked the text; one it could not have sent leaves the selection as it is.
    if (auto set = config::IterationSet::parse(u.iteration())) {
      filter->setIterations(std::move(set).value());
      paused = u.paused();
      recorder_on = u.recorder_on();
      replica_every = u.replica_every();
      selection_generation = u.generation();
    }
    pending_selection.reset();
  }

  Error dead() const {
    return makeError(ErrorCode::kUnavailable, closed ? "client is closed" : fatal);
  }

  // Reads every frame the daemon sent unasked (an Error ending the session, a selection
  // update). Non-blocking. Reads until the socket is empty (a bounded number of times): the
  // daemon enforces an update from the second step mark after it sent it, so a frame larger
  // than one read must not wait for the next step.
  void pollDaemon() {
    for (int reads = 0; reads < kMaxPollReads; ++reads) {
      pollfd p{sock.get(), POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) return;
      std::vector<UniqueFd> fds;
      const ssize_t n = ipc::recvWithFds(sock.get(), decoder, fds);
      if (n == 0) {
        fatal = "dumpd closed the session";
        return;
      }
      if (n < 0) return;  // EAGAIN or EINTR: looked at again at the next step mark
      for (;;) {
        auto env = decoder.next();
        if (!env) {
          fatal = env.error().message;
          return;
        }
        if (!env.value()) break;
        if (env.value()->has_error()) {
          fatal = "dumpd ended the session: " + env.value()->error().message();
          return;
        }
        if (env.value()->has_selection_update()) {
          // dumpctl control: applied at the next step mark (applySelection).
          pending_selection = env.value()->selection_update();
        }
      }
    }
  }
  static constexpr int kMaxPollReads = 16;  // of 64 KiB: an update is at most ~64 KiB

  // The daemon marked the ring closing (SIGTERM or it ended the session): every record
  // committed before is written; nothing new can start.
  Error closingError() {
    if (fatal.empty()) fatal = "dumpd is shutting down: the dump session is closed";
    return makeError(ErrorCode::kUnavailable, fatal);
  }

  // Waits for ring space under the block policy, watching the daemon's liveness.
  Status waitForSpace(uint64_t body) {
    ++stats.blocked_waits;
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      if (ring->waitForSpace(body, kLivenessSliceMs)) return {};
      if (ring->closing()) return closingError();
      pollDaemon();
      if (!fatal.empty()) return dead();
      if (block_timeout_ms > 0 &&
          std::chrono::steady_clock::now() - start > std::chrono::milliseconds(block_timeout_ms)) {
        return makeError(ErrorCode::kTimeout, "ring full for " + std::to_string(block_timeout_ms) +
                                                  " ms (block policy); dumpd is not keeping up");
      }
    }
  }

  // Reserves `body` bytes. nullptr with ok status = dropped (drop policy).
  Result<std::byte*> reserve(ipc::RecordKind kind, uint64_t body, bool may_drop) {
    if (body > ring->maxBodyBytes()) {
      return makeError(ErrorCode::kInvalidArgument,
                       "record of " + std::to_string(body) + " bytes does not fit the ring of " +
                           std::to_string(ring->capacity()) + " bytes; raise ring_bytes");
    }
    for (;;) {
      std::byte* p = ring->tryReserve(kind, body);
      if (p != nullptr) return p;
      if (ring->closing()) return closingError();
      if (may_drop && backpressure == ipc::Backpressure::kDrop) return nullptr;
      if (Status s = waitForSpace(body); !s) return s.error();
    }
  }

  // `device_payload`: the payload is the bytes of this CUDA tensor, copied by the pipeline.
  Status sendControl(const v1::Control& ctl, const void* payload, uint64_t payload_bytes,
                     const Tensor* device_payload = nullptr) {
    if (closed || !fatal.empty()) return dead();
    if (device_payload != nullptr) {
      if (Status s = ensurePipeline(); !s) return s;
    }
    const uint64_t ctl_bytes = ctl.ByteSizeLong();
    auto r = reserve(ipc::RecordKind::kControl, ipc::controlBodyBytes(ctl_bytes, payload_bytes),
                     /*may_drop=*/false);
    if (!r) return r.error();
    std::byte* const to = ipc::writeControl(r.value(), ctl, ctl_bytes);
    ++stats.records_committed;
    if (device_payload != nullptr && payload_bytes != 0) {
      const DeviceCopy copy{to, payload, payload_bytes};
      return pipeline->submit(ring->reservedSequence(), device_payload->device, nullptr,
                              std::span(&copy, 1), 1);
    }
    if (payload_bytes != 0) std::memcpy(to, payload, payload_bytes);
    ring->commit();
    return {};
  }
};

}  // namespace dumpd::client
