#include "daemon/trigger_outcome.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
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
  if (replicas) j["replicas"] = replicas->toJson();
  // Names and reasons come from the client: invalid UTF-8 is replaced, never refused.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string TriggerEvent::Replicas::text() const {
  std::string s = tensor + " at iteration " + std::to_string(iteration) + ": ";
  if (differing_count == 1) {
    s += "rank " + std::to_string(differing.empty() ? 0 : differing[0].first) + " of " +
         std::to_string(group_size) + " differs";
  } else {
    s += std::to_string(differing_count) + " of " + std::to_string(group_size) + " ranks differ";
  }
  return s;
}

nlohmann::json TriggerEvent::Replicas::toJson() const {
  // Digests as hex strings: JSON readers lose integers above 2^53.
  const auto hex = [](uint64_t d) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(d));
    return std::string(buf);
  };
  nlohmann::json differ = nlohmann::json::array();
  for (const auto& [rank, digest] : differing) {
    differ.push_back({{"rank", rank}, {"digest", hex(digest)}});
  }
  nlohmann::json j = {{"tensor", tensor},
                      {"iteration", iteration},
                      {"group_size", group_size},
                      {"majority_digest", hex(majority)},
                      {"differing", std::move(differ)}};
  if (differing_count > differing.size()) j["differing_count"] = differing_count;
  return j;
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

namespace {

constexpr std::string_view kDiscarded =
    "its records were discarded to make room (ring_bytes or flight_recorder.max_bytes too small "
    "for it: see the status warning)";
constexpr std::string_view kNotWhole =
    "some of its records were discarded to make room (ring_bytes or flight_recorder.max_bytes "
    "too small for a whole iteration)";
constexpr std::string_view kDeviceLost =
    "its tensors stayed on the client's device and did not reach dumpd (device_tensors_lost)";
constexpr std::string_view kDeviceLostPart =
    "some of its tensors stayed on the client's device and did not reach dumpd "
    "(device_tensors_lost)";
constexpr std::string_view kMemory =
    "its records were discarded to make room in dumpd's memory for kept records "
    "(recorder_memory_bytes was used up: see refused_for_memory and discarded_for_memory in "
    "status)";
constexpr std::string_view kNothingSelected = "no op of it passed the job's filters";
constexpr std::string_view kNotRun = "the job did not run it (its iterations went past it)";

// The smallest element of `s` at or after `from`, or UINT64_MAX.
uint64_t nextIn(const std::set<uint32_t>& s, uint64_t from) {
  if (from > UINT32_MAX) return UINT64_MAX;
  auto it = s.lower_bound(static_cast<uint32_t>(from));
  return it == s.end() ? UINT64_MAX : *it;
}

}  // namespace

void TriggerOutcome::kept(uint32_t iteration, size_t records, size_t written, bool whole) {
  if (records == 0) {
    discarded_.insert(iteration);
    return;
  }
  if (written < records) lost_.insert(iteration);
  if (written == 0) return;
  written_.insert(iteration);
  if (!whole) not_whole_.emplace(iteration, kNotWhole);
}

std::string TriggerOutcome::cutShort(uint32_t iteration) const {
  if (auto it = not_whole_.find(iteration); it != not_whole_.end()) return it->second;
  if (lost_.contains(iteration)) return std::string(kDeviceLostPart);
  return {};
}

TriggerEvent TriggerOutcome::close(std::optional<uint32_t> started, std::string_view why_rest) {
  TriggerEvent e = std::move(event_);
  e.written.assign(written_.begin(), written_.end());
  e.not_written.clear();
  e.not_whole.clear();
  const auto add = [&](uint64_t first, uint64_t last, std::string_view why) {
    if (!e.not_written.empty() && e.not_written.back().why == why &&
        uint64_t{e.not_written.back().last} + 1 == first) {
      e.not_written.back().last = static_cast<uint32_t>(last);
      return;
    }
    e.not_written.push_back(
        {static_cast<uint32_t>(first), static_cast<uint32_t>(last), std::string(why)});
  };
  // Kept iterations before the one it fired during.
  std::set<uint32_t> before;
  for (const std::set<uint32_t>* set : {&discarded_, &lost_, &memory_}) {
    before.insert(set->begin(), set->lower_bound(e.iteration));
  }
  for (uint32_t i : before) {
    if (written_.contains(i)) continue;
    add(i, i, memory_.contains(i) ? kMemory : discarded_.contains(i) ? kDiscarded : kDeviceLost);
  }
  for (uint32_t i : lost_) {
    if (written_.contains(i)) not_whole_.emplace(i, kDeviceLostPart);
  }
  // The window, walked from one iteration something is known of to the next: what lies
  // between is either not run (before `started`) or did not come (after it).
  const uint64_t end = last_;
  uint64_t i = e.iteration;
  while (i <= end) {
    if (written_.contains(static_cast<uint32_t>(i))) {
      ++i;
      continue;
    }
    if (discarded_.contains(static_cast<uint32_t>(i))) {
      add(i, i, kDiscarded);
    } else if (lost_.contains(static_cast<uint32_t>(i))) {
      add(i, i, kDeviceLost);
    } else if (done_.contains(static_cast<uint32_t>(i))) {
      add(i, i, kNothingSelected);
    } else if (started && i == *started) {
      add(i, i, why_rest);
    } else {
      uint64_t next = std::min({nextIn(written_, i), nextIn(discarded_, i), nextIn(lost_, i),
                                nextIn(done_, i), end + 1});
      if (started && *started > i) next = std::min<uint64_t>(next, *started);
      add(i, next - 1, started && i < *started ? kNotRun : why_rest);
      i = next;
      continue;
    }
    ++i;
  }
  for (const auto& [iteration, why] : not_whole_) e.not_whole.push_back({iteration, why});
  return e;
}

}  // namespace dumpd::daemon
