#include "daemon/flight_recorder.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/utf8.h"

namespace dumpd::daemon {
namespace {

// A journal line lists at most this many iterations or losses; longer lists are summarised
// (their count, and the iterations as ranges), so that one line stays small.
constexpr size_t kMaxListed = 64;
constexpr size_t kMaxRangesText = 1024;

// "3-9|12|20-24", cut after kMaxRangesText bytes with "|...". `v` ascending.
std::string rangesText(const std::vector<uint32_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    std::string part = std::to_string(v[i]);
    if (j > i) {
      // Appended in two steps: GCC 12 warns (-Wrestrict, a false positive) on
      // `"-" + std::to_string(...)` when inlined at -O2.
      part += '-';
      part += std::to_string(v[j]);
    }
    if (out.size() + part.size() + 1 > kMaxRangesText) return out + "|...";
    if (!out.empty()) out += "|";
    out += part;
    i = j + 1;
  }
  return out;
}

// JSON has no NaN or infinity: such losses are written as strings.
nlohmann::json lossJson(double v) {
  if (std::isfinite(v)) return v;
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

}  // namespace

std::string TriggerEvent::toJsonLine(uint64_t time_us, uint32_t rank) const {
  nlohmann::json j;
  j["time_us"] = time_us;
  j["rank"] = rank;
  j["iteration"] = iteration;
  j["kind"] = std::string(config::recorderTriggerName(kind));
  j["reason"] = reason;
  if (!op_name.empty()) {
    j["op"] = op_name;
    j["tensor"] = tensor;
  }
  if (kind == config::RecorderTrigger::kLossSpike) {
    nlohmann::json l = nlohmann::json::array();
    // The newest kMaxListed, the new loss last.
    const size_t skip = losses.size() > kMaxListed ? losses.size() - kMaxListed : 0;
    for (size_t i = skip; i < losses.size(); ++i) l.push_back(lossJson(losses[i]));
    j["losses"] = std::move(l);
    if (skip != 0) j["losses_count"] = losses.size();
  }
  if (written.size() <= kMaxListed) {
    j["iterations_written"] = written;
  } else {
    j["iterations_written"] = std::vector<uint32_t>(written.begin(), written.begin() + kMaxListed);
    j["iterations_written_count"] = written.size();
    j["iterations_written_ranges"] = rangesText(written);
  }
  nlohmann::json missed = nlohmann::json::array();
  for (size_t i = 0; i < not_written.size() && i < kMaxListed; ++i) {
    const NotWritten& n = not_written[i];
    missed.push_back({{"first", n.first}, {"last", n.last}, {"why", n.why}});
  }
  j["iterations_not_written"] = std::move(missed);
  if (not_written.size() > kMaxListed) j["iterations_not_written_count"] = not_written.size();
  nlohmann::json partial = nlohmann::json::array();
  for (size_t i = 0; i < not_whole.size() && i < kMaxListed; ++i) {
    partial.push_back({{"iteration", not_whole[i].iteration}, {"why", not_whole[i].why}});
  }
  j["iterations_not_whole"] = std::move(partial);
  if (not_whole.size() > kMaxListed) j["iterations_not_whole_count"] = not_whole.size();
  if (first_nonfinite) {
    j["first_nonfinite"] = {{"iteration", first_nonfinite->iteration},
                            {"op", first_nonfinite->op_name},
                            {"tensor", first_nonfinite->tensor},
                            {"value", first_nonfinite->nan ? "nan" : "inf"}};
  }
  if (device_tensors_lost != 0) j["device_tensors_lost"] = device_tensors_lost;
  // Names and reasons come from the client: invalid UTF-8 is replaced, never refused.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string TriggerEvent::summary() const {
  std::string s =
      std::string(config::recorderTriggerName(kind)) + " at iteration " + std::to_string(iteration);
  if (!op_name.empty()) s += ": " + op_name + " " + tensor;
  if (!reason.empty() && op_name.empty()) s += ": " + reason;
  if (first_nonfinite &&
      (first_nonfinite->op_name != op_name || first_nonfinite->iteration != iteration)) {
    s += "; first " + std::string(first_nonfinite->nan ? "NaN" : "infinity") + ": " +
         first_nonfinite->op_name + " " + first_nonfinite->tensor + " at iteration " +
         std::to_string(first_nonfinite->iteration);
  }
  return s;
}

std::string TriggerEvent::outcomeSummary() const {
  std::string s = written.empty() ? std::string("wrote no iteration")
                                  : "wrote iterations " + rangesText(written);
  for (size_t i = 0; i < not_written.size() && i < 4; ++i) {
    s += i == 0 ? "; not written: " : ", ";
    const NotWritten& n = not_written[i];
    s += std::to_string(n.first);
    if (n.last != n.first) {
      s += '-';
      s += std::to_string(n.last);
    }
    s += " (" + n.why + ")";
  }
  if (not_written.size() > 4) s += " and " + std::to_string(not_written.size() - 4) + " more";
  if (!not_whole.empty()) {
    s += "; " + std::to_string(not_whole.size()) +
         " written in part (first: " + std::to_string(not_whole.front().iteration) + ")";
  }
  return s;
}

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
