#include "daemon/flight_recorder.h"

#include <algorithm>
#include <utility>

#include "base/utf8.h"

namespace dumpd::daemon {

FlightRecorder::FlightRecorder(config::FlightRecorderPlan plan)
    : plan_(plan),
      kept_(plan.steps, plan.max_bytes, kMaxKeptRecords),
      losses_(plan.loss_window, plan.loss_factor) {
  last_trigger_.store(std::make_shared<const std::string>());
  warning_.store(std::make_shared<const std::string>());
}

void FlightRecorder::publishCounts() {
  kept_iterations_.store(static_cast<uint32_t>(kept_.iterations()), std::memory_order_relaxed);
  kept_bytes_.store(kept_.bytes(), std::memory_order_relaxed);
  not_whole_.store(kept_.notKeptWhole(), std::memory_order_relaxed);
  refused_for_memory_.store(kept_.refusedForMemory(), std::memory_order_relaxed);
  discarded_for_memory_.store(kept_.discardedForMemory(), std::memory_order_relaxed);
}

std::vector<KeptRecord> FlightRecorder::keep(uint32_t iteration, KeptRecord r, uint64_t bytes,
                                             uint64_t memory) {
  if (iteration != counting_iteration_) {
    counting_iteration_ = iteration;
    iteration_bytes_ = 0;
  }
  iteration_bytes_ += bytes;
  largest_iteration_ = std::max(largest_iteration_, iteration_bytes_);
  std::vector<KeptRecord> out = kept_.add(iteration, std::move(r), bytes, memory);
  publishCounts();
  return out;
}

std::vector<KeptRecord> FlightRecorder::discardForSpace() {
  std::vector<KeptRecord> out = kept_.discardOldest();
  if (!out.empty()) discarded_for_space_.fetch_add(1, std::memory_order_relaxed);
  if (out.empty()) out = kept_.discardNewest();
  publishCounts();
  return out;
}

std::vector<KeptRecord> FlightRecorder::releaseAll() {
  std::vector<KeptRecord> out;
  for (Kept::Iteration& it : kept_.takeAll()) {
    for (KeptRecord& r : it.items) out.push_back(std::move(r));
  }
  publishCounts();
  return out;
}

std::optional<TriggerEvent> FlightRecorder::onLoss(uint32_t iteration, double loss) {
  std::optional<std::string> why = losses_.report(loss);
  if (!why) return std::nullopt;
  TriggerEvent e;
  e.kind = config::RecorderTrigger::kLossSpike;
  e.iteration = iteration;
  e.reason = *why;
  e.losses = losses_.windowAtLastTrigger();
  e.losses.push_back(loss);
  return e;
}

std::vector<FlightRecorder::Kept::Iteration> FlightRecorder::fire(TriggerEvent& e) {
  std::vector<Kept::Iteration> out = kept_.takeAll();
  const uint32_t first = out.empty() ? e.iteration : std::min(out.front().number, e.iteration);
  const uint64_t last = uint64_t{e.iteration} + plan_.after_steps;
  window_ = Window{first, static_cast<uint32_t>(std::min<uint64_t>(last, UINT32_MAX))};
  ++fired_;
  if (plan_.max_triggers != 0 && fired_ >= plan_.max_triggers) {
    recording_.store(false, std::memory_order_relaxed);
  }
  triggers_.store(fired_, std::memory_order_relaxed);
  // The op name and reason are the client's bytes: status sends them as a protobuf string.
  last_trigger_.store(std::make_shared<const std::string>(toValidUtf8(cutUtf8(e.summary(), 1024))));
  publishCounts();
  return out;
}

void FlightRecorder::setWarning(std::string warning) {
  warning_.store(std::make_shared<const std::string>(std::move(warning)));
}

void FlightRecorder::fillStatus(v1::RecorderStatus* out) const {
  out->set_recording(recording());
  out->set_steps(plan_.steps);
  out->set_kept_iterations(kept_iterations_.load(std::memory_order_relaxed));
  out->set_kept_bytes(kept_bytes_.load(std::memory_order_relaxed));
  out->set_not_kept_whole(not_whole_.load(std::memory_order_relaxed));
  out->set_triggers(triggers_.load(std::memory_order_relaxed));
  out->set_last_trigger(*last_trigger_.load());
  out->set_warning(*warning_.load());
  out->set_discarded_for_space(discarded_for_space_.load(std::memory_order_relaxed));
  out->set_producer_waits(producer_waits_.load(std::memory_order_relaxed));
  out->set_refused_for_memory(refused_for_memory_.load(std::memory_order_relaxed));
  out->set_discarded_for_memory(discarded_for_memory_.load(std::memory_order_relaxed));
}

}  // namespace dumpd::daemon
