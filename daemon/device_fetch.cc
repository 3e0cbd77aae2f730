#include "daemon/device_fetch.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <string>

namespace dumpd::daemon {
namespace {

// The longest sleep between looks at a fetch's tensors: the client wakes the session when it
// filled them; this bounds how long a missed wake (or a client that died) goes unnoticed.
constexpr int64_t kFetchWaitMs = 50;

uint64_t stateOf(const OpTask::Deferred& d) {
  // Acquire: the bytes the client copied before it stored "filled" are visible after.
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(d.state)).load(std::memory_order_acquire);
}

void publishFailure(storage::TensorMemo* memo, const char* why) {
  if (memo == nullptr) return;
  storage::MemoResult m;
  m.error = why;
  memo->publish(std::move(m));
}

}  // namespace

DeviceFetch::DeviceFetch(uint64_t session_id, Settings settings, ipc::RingConsumer& ring,
                         ReleaseQueue& release, DrainCounters& counters, SessionWarnings& warnings)
    : id_(session_id),
      settings_(std::move(settings)),
      ring_(ring),
      release_(release),
      counters_(counters),
      warnings_(warnings) {}

void DeviceFetch::noteKept(const OpTask& task) {
  if (task.deferred.empty()) return;
  const uint32_t iteration = task.op.iteration;
  if (iteration != iteration_) iteration_bytes_ = 0;
  iteration_ = iteration;
  for (const OpTask::Deferred& d : task.deferred) {
    iteration_bytes_ += ipc::alignUp(d.size, 256);  // the client's staging alignment
  }
  largest_iteration_ = std::max(largest_iteration_, iteration_bytes_);
}

uint64_t DeviceFetch::fetch(const std::vector<OpTask*>& tasks, uint32_t through_iteration) {
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
  if (pending() && producerAlive() && !unanswered_) {
    ring_.requestFetch(from, through_iteration);
    // The client's issuer looks for the request every few milliseconds, then waits for its
    // snapshots, copies them (a trigger's kept iterations: up to a few GB) and wakes this
    // thread. The timed wait only covers a wake that is never sent (a client gone).
    const auto deadline = std::chrono::steady_clock::now() + settings_.timeout;
    for (;;) {
      const uint32_t seen = ring_.wakeValue();
      if (!pending() || !producerAlive()) break;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        unanswered_ = true;
        spdlog::warn(
            "session {}: the client did not send the tensors it keeps on its device "
            "within {} ms (recorder_fetch_timeout_ms); they are not written",
            id_, settings_.timeout.count());
        break;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      ring_.waitForWake(seen, static_cast<int>(std::clamp<int64_t>(left.count(), 1, kFetchWaitMs)));
    }
  }
  // False: the client is alive but did not copy them in time.
  const bool answered = !unanswered_ || !producerAlive();
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
        publishFailure(v.memo, "its record's tensors kept on the device never reached the host");
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
        publishFailure(t->views[i].memo,
                       "it was kept on the client's device and never reached the host");
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

bool DeviceFetch::holdAbandoned(std::shared_ptr<OpTask>& task, uint64_t slot) {
  if (!task->abandoned) return false;
  abandoned_.push_back(KeptRecord{std::move(task), slot});
  return true;
}

void DeviceFetch::releaseAnswered(bool all) {
  if (abandoned_.empty()) return;
  const bool gone = all || !producerAlive();
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
  if (abandoned_.empty()) unanswered_ = false;
}

}  // namespace dumpd::daemon
