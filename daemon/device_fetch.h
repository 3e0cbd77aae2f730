// The tensors a client keeps on its device for the flight recorder (docs/recorder.md,
// "Keeping CUDA tensors on the device"): such a record carries the device's statistics and
// the room for its bytes, which the client copies there when the daemon asks for them
// (RingControl::fetch_*, DeferredPayload::state). DeviceFetch asks, waits bounded, gives the
// views their bytes or counts them lost, and holds the records of a fetch the client did not
// answer in time until it has, or is gone (a late copy may still land in them).
//
// Thread-safety: none; the session thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "daemon/drain_counters.h"
#include "daemon/flight_recorder.h"
#include "daemon/op_task.h"
#include "daemon/release_queue.h"
#include "daemon/session_warnings.h"
#include "ipc/shm_ring.h"

namespace dumpd::daemon {

class DeviceFetch {
 public:
  struct Settings {
    // Whether the client can still answer (false once it exited, said Goodbye, or the
    // session is stopping). Null: never.
    std::function<bool()> producer_alive;
    // How long a fetch may take (recorder_fetch_timeout_ms).
    std::chrono::milliseconds timeout{30000};
    // The client's device staging (Hello), for the recorder's sizing warning.
    uint64_t staging_bytes = 0;
  };

  // Lost tensors are counted in `counters` (tensors_failed) with a warning in `warnings`.
  DeviceFetch(uint64_t session_id, Settings settings, ipc::RingConsumer& ring,
              ReleaseQueue& release, DrainCounters& counters, SessionWarnings& warnings);

  // Asks the client for the deferred tensors of `tasks` (records up to iteration
  // `through_iteration` are to be sent whole from now on) and waits, bounded, until each is
  // filled or lost. Filled views get their bytes; lost ones are removed and counted as
  // failed; a task the client never answered for is marked abandoned. Returns the tensors
  // lost.
  uint64_t fetch(const std::vector<OpTask*>& tasks, uint32_t through_iteration);
  // Holds an abandoned task's record (`slot`) until the client answers or is gone; false
  // when `task` is not abandoned.
  bool holdAbandoned(std::shared_ptr<OpTask>& task, uint64_t slot);
  // Releases the records of an unanswered fetch whose client has answered since, or is gone
  // (`all`: the session ends). Cheap when there are none.
  void releaseAnswered(bool all = false);
  // A recorded record was kept: its deferred tensors use the client's staging.
  void noteKept(const OpTask& task);
  // Staging bytes the client held for its largest recorded iteration so far.
  uint64_t largestIterationBytes() const { return largest_iteration_; }
  uint64_t stagingBytes() const { return settings_.staging_bytes; }

 private:
  bool producerAlive() const { return settings_.producer_alive && settings_.producer_alive(); }

  const uint64_t id_;
  const Settings settings_;
  ipc::RingConsumer& ring_;
  ReleaseQueue& release_;
  DrainCounters& counters_;
  SessionWarnings& warnings_;
  // Staging bytes the client holds for the recorded iteration it is in, and the largest.
  uint32_t iteration_ = 0;
  uint64_t iteration_bytes_ = 0;
  uint64_t largest_iteration_ = 0;
  // A fetch the client did not answer in time: later ones do not wait until it has.
  bool unanswered_ = false;
  std::deque<KeptRecord> abandoned_;  // in record order
};

}  // namespace dumpd::daemon
