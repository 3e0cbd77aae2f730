// RingDrain and the tensors a client keeps on its device for the flight recorder
// (docs/recorder.md, "Keeping CUDA tensors on the device"): such a record carries the
// device's statistics and the room for its bytes, which the client copies there when the
// daemon fetches them (RingControl::fetch_*, DeferredPayload::state).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "daemon/ring_drain.h"
#include "storage/format/statistics.h"

namespace dumpd::daemon {
namespace {

// The longest sleep between looks at a fetch's tensors: the client wakes the session when it
// filled them; this bounds how long a missed wake (or a client that died) goes unnoticed.
constexpr int64_t kFetchWaitMs = 50;

uint64_t stateOf(const OpTask::Deferred& d) {
  // Acquire: the bytes the client copied before it stored "filled" are visible after.
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(d.state)).load(std::memory_order_acquire);
}

}  // namespace

bool RingDrain::deferredPayloadValid(uint64_t sequence, const ipc::DecodedOp& op,
                                     const ipc::DecodedTensor& t, DType dtype,
                                     const std::optional<uint64_t>& elements) {
  const std::string where =
      "record " + std::to_string(sequence) + ": a tensor of " + std::string(op.opName());
  if (!storage::hasStatistics(dtype)) {
    return fail(where + " is kept on the device, but its dtype has no statistics");
  }
  if (reinterpret_cast<uintptr_t>(t.data) % alignof(ipc::DeferredPayload) != 0) {
    return fail(where + " is kept on the device at a misaligned payload offset");
  }
  if (!elements || t.data_bytes - ipc::kDeferredHeaderBytes != sourceBytes(dtype, *elements)) {
    return fail(where + " is kept on the device with " + std::to_string(t.data_bytes) +
                " payload bytes, which do not match its shape and dtype");
  }
  return true;
}

uint64_t RingDrain::fetchDeferred(const std::vector<OpTask*>& tasks, uint32_t through_iteration) {
  uint64_t from = UINT64_MAX;
  for (const OpTask* t : tasks) {
    if (!t->deferred.empty()) from = std::min(from, t->sequence);
  }
  if (from == UINT64_MAX) return 0;
  // Every state the fetch waits for, in record order. A state moves from "on device" once
  // (filled or lost), and the client fills them roughly in order: a cursor that passes the
  // ones no longer on the device makes each look cost O(1), not a scan of every tensor.
  std::vector<const OpTask::Deferred*> states;
  for (const OpTask* t : tasks) {
    for (const OpTask::Deferred& d : t->deferred) states.push_back(&d);
  }
  size_t cursor = 0;
  const auto pending = [&] {
    while (cursor < states.size() && stateOf(*states[cursor]) != ipc::kDeferredOnDevice) ++cursor;
    return cursor < states.size();
  };
  const auto alive = [&] { return producer_alive_ && producer_alive_(); };
  if (pending() && alive() && !fetch_unanswered_) {
    ring_.requestFetch(from, through_iteration);
    // The client's issuer looks for the request every few milliseconds, then waits for its
    // snapshots, copies them (a trigger's kept iterations: up to a few GB) and wakes this
    // thread. The timed wait only covers a wake that is never sent (a client gone).
    const auto deadline = std::chrono::steady_clock::now() + fetch_timeout_;
    for (;;) {
      const uint32_t seen = ring_.wakeValue();
      if (!pending() || !alive()) break;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        fetch_unanswered_ = true;
        spdlog::warn(
            "session {}: the client did not send the tensors it keeps on its device "
            "within {} ms (recorder_fetch_timeout_ms); they are not written",
            id_, fetch_timeout_.count());
        break;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      ring_.waitForWake(seen, static_cast<int>(std::clamp<int64_t>(left.count(), 1, kFetchWaitMs)));
    }
  }
  // False: the client is alive but did not copy them in time.
  const bool answered = !fetch_unanswered_ || !alive();
  uint64_t lost = 0;
  for (OpTask* t : tasks) {
    std::vector<bool> drop(t->views.size(), false);
    bool unanswered = false;
    for (const OpTask::Deferred& d : t->deferred) {
      const uint64_t state = stateOf(d);
      storage::TensorView& v = t->views[d.view];
      if (state == ipc::kDeferredFilled) {
        v.sums = nullptr;  // the writer computes the statistics from the bytes
        v.data = std::span<const std::byte>(d.bytes, d.size);
        continue;
      }
      drop[d.view] = true;
      unanswered = unanswered || (state == ipc::kDeferredOnDevice && !answered);
    }
    if (unanswered) {
      // Not written; its ring space stays held until the client answers or goes
      // (releaseAnswered), and a repeat of one of its tensors must not wait for it.
      t->abandoned = true;
      lost += t->views.size();
      for (const storage::TensorView& v : t->views) {
        if (v.memo != nullptr) {
          storage::MemoResult m;
          m.error = "its record's tensors kept on the device never reached the host";
          v.memo->publish(std::move(m));
        }
      }
      continue;
    }
    t->deferred.clear();
    std::vector<storage::TensorView> kept;
    uint64_t bytes = 0;
    for (size_t i = 0; i < t->views.size(); ++i) {
      if (drop[i]) {
        ++lost;
        // A dump-once source: its repeats fail with it rather than wait for its file.
        if (storage::TensorMemo* memo = t->views[i].memo; memo != nullptr) {
          storage::MemoResult m;
          m.error = "it was kept on the client's device and never reached the host";
          memo->publish(std::move(m));
        }
        continue;
      }
      kept.push_back(t->views[i]);
      bytes += t->views[i].data.size();
    }
    t->views = std::move(kept);
    t->bytes = bytes;
  }
  if (lost != 0) {
    counters_.tensors_failed.fetch_add(lost, std::memory_order_relaxed);
    warnings_.warn(std::to_string(lost) +
                   " tensors kept on the client's device never reached the host (the client "
                   "exited, gave the snapshots up for staging space, or did not answer)");
  }
  return lost;
}

bool RingDrain::writeFetched(std::shared_ptr<OpTask> task, uint64_t slot) {
  if (task->abandoned) {
    abandoned_.push_back(KeptRecord{std::move(task), slot});
    return false;
  }
  if (task->views.empty()) {
    release_.markDone(slot);
    return false;
  }
  release_.write(slot);
  submitWrite(std::move(task), slot);
  return true;
}

void RingDrain::releaseAnswered(bool all) {
  if (abandoned_.empty()) return;
  const bool gone = all || !producer_alive_ || !producer_alive_();
  // In record order, up to the first record the client has not answered: each call looks at
  // the records it releases and one more, never at every state held.
  size_t done = 0;
  for (; done < abandoned_.size(); ++done) {
    const OpTask& t = *abandoned_[done].task;
    const bool answered =
        gone || std::all_of(t.deferred.begin(), t.deferred.end(), [](const OpTask::Deferred& d) {
          return stateOf(d) != ipc::kDeferredOnDevice;
        });
    if (!answered) break;
    release_.markDone(abandoned_[done].slot);  // no copy of the client's can land there any more
  }
  abandoned_.erase(abandoned_.begin(), abandoned_.begin() + static_cast<ptrdiff_t>(done));
  // Every late answer came: the client is waited for again.
  if (abandoned_.empty()) fetch_unanswered_ = false;
}
}  // namespace dumpd::daemon
