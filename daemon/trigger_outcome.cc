#include "daemon/trigger_outcome.h"

#include <algorithm>
#include <utility>

namespace dumpd::daemon {
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
