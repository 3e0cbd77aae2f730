#include "daemon/runtime_selection.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/utf8.h"

namespace dumpd::daemon {
namespace {

nlohmann::json toJson(const Selection& s) {
  nlohmann::json j = {{"paused", s.paused}, {"recorder_on", s.recorder_on}};
  if (s.replica_every != 0) j["replica_every"] = s.replica_every;
  if (s.iteration.size() <= RuntimeSelection::kMaxJournalIterationBytes) {
    j["iteration"] = s.iteration;
    return j;
  }
  // Summarised: the first ranges whole, then "...", and how many there are.
  std::string_view text = s.iteration;
  text = text.substr(0, RuntimeSelection::kMaxJournalIterationBytes);
  text = text.substr(0, text.rfind('|'));
  j["iteration"] = std::string(text) + "|...";
  j["iteration_ranges"] = s.iterations ? s.iterations->ranges().size() : 0;
  j["iteration_bytes"] = s.iteration.size();
  return j;
}

// What already holds of each thing `change` names (it changes none of them).
std::string unchanged(const v1::ControlChange& change, const Selection& old) {
  std::string out;
  const auto add = [&](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  if (change.has_iteration()) {
    add("the selection already is iteration \"" + std::string(cutUtf8(old.iteration, 256)) + "\"");
  }
  if (change.has_paused()) {
    add(old.paused ? "the session is already paused"
                   : "the session is not paused (nothing to resume)");
  }
  if (change.has_recorder_on()) {
    add(std::string("the flight recorder is already ") + (old.recorder_on ? "on" : "off"));
  }
  if (change.has_replica_every()) {
    add("replicas are already checked every " + std::to_string(old.replica_every) + " steps");
  }
  return out;
}

}  // namespace

RuntimeSelection::RuntimeSelection(Selection initial, bool has_recorder)
    : has_recorder_(has_recorder) {
  initial.generation = 0;
  initial.sent_at = 0;
  if (!initial.iterations) {
    auto set = config::IterationSet::parse(initial.iteration);
    initial.iterations = std::make_shared<const config::IterationSet>(
        set ? std::move(set).value() : config::IterationSet::all());
  }
  recent_.push_back(std::move(initial));
}

Result<Selection> RuntimeSelection::change(const v1::ControlChange& change,
                                           std::optional<uint32_t> uid, uint64_t time_us,
                                           uint64_t ring_position, std::string_view reason) {
  std::shared_ptr<const config::IterationSet> iterations;
  if (change.has_iteration()) {
    if (change.iteration().size() > kMaxIterationBytes) {
      return makeError(ErrorCode::kInvalidArgument,
                       "the iteration list is " + std::to_string(change.iteration().size()) +
                           " bytes; dumpctl control takes at most " +
                           std::to_string(kMaxIterationBytes) +
                           " (give wider ranges: \"100-200\" rather than each iteration)");
    }
    auto set = config::IterationSet::parse(change.iteration());
    if (!set) return set.error();
    if (set.value().ranges().size() > kMaxIterationRanges) {
      return makeError(ErrorCode::kInvalidArgument,
                       "the iteration list has " + std::to_string(set.value().ranges().size()) +
                           " separate ranges; dumpctl control takes at most " +
                           std::to_string(kMaxIterationRanges) + " (merge them into wider ones)");
    }
    iterations = std::make_shared<const config::IterationSet>(std::move(set).value());
  }
  if (change.has_recorder_on() && !has_recorder_) {
    return makeError(ErrorCode::kInvalidConfig,
                     "the job has no flight recorder to turn on or off (the job config's "
                     "flight_recorder)");
  }
  if (change.has_replica_every() &&
      (change.replica_every() == 0 || change.replica_every() > kMaxReplicaEvery)) {
    return makeError(ErrorCode::kInvalidConfig,
                     "--replica-every must be 1 .. " + std::to_string(kMaxReplicaEvery) +
                         " optimizer steps, not " + std::to_string(change.replica_every()));
  }
  if (!change.has_iteration() && !change.has_paused() && !change.has_recorder_on() &&
      !change.has_replica_every()) {
    return makeError(ErrorCode::kInvalidArgument, "nothing to change");
  }
  MutexLock lock(&mu_);
  const Selection old = recent_.back();
  Selection next = old;
  ++next.generation;
  next.sent_at = std::max(ring_position, old.sent_at);
  if (iterations) {
    next.iteration = iterations->toString();
    next.iterations = std::move(iterations);
  }
  if (change.has_paused()) next.paused = change.paused();
  if (change.has_recorder_on()) next.recorder_on = change.recorder_on();
  if (change.has_replica_every()) next.replica_every = change.replica_every();
  if (next.iteration == old.iteration && next.paused == old.paused &&
      next.recorder_on == old.recorder_on && next.replica_every == old.replica_every) {
    return makeError(ErrorCode::kInvalidArgument, "nothing to change: " + unchanged(change, old));
  }
  next.changed_by = uid ? "uid " + std::to_string(*uid) : "dumpd (" + std::string(reason) + ")";
  if (!next.paused) {
    paused_from_.store(UINT64_MAX, std::memory_order_release);
  } else if (!old.paused) {
    paused_from_.store(next.sent_at, std::memory_order_release);
  }
  recent_.push_back(next);
  // The initial selection stays: it is what generation 0 means.
  while (recent_.size() > kMaxKept) recent_.erase(recent_.begin() + 1);
  nlohmann::json line = {{"time_us", time_us},
                         {"generation", next.generation},
                         {"old", toJson(old)},
                         {"new", toJson(next)}};
  if (uid) {
    line["uid"] = *uid;
  } else {
    line["by"] = "dumpd";
  }
  if (!reason.empty()) line["reason"] = toValidUtf8(reason);
  if (journal_.size() < kMaxQueuedJournalLines) {
    journal_.push_back(line.dump() + "\n");
  } else {
    ++journal_dropped_;
  }
  return next;
}

std::optional<Selection> RuntimeSelection::find(uint64_t generation) const {
  MutexLock lock(&mu_);
  for (const Selection& s : recent_) {
    if (s.generation == generation) return s;
  }
  return std::nullopt;
}

uint64_t RuntimeSelection::boundBefore(uint64_t ring_position) const {
  MutexLock lock(&mu_);
  for (auto it = recent_.rbegin(); it != recent_.rend(); ++it) {
    if (it->generation == 0 || it->sent_at < ring_position) return it->generation;
  }
  return 0;
}

Selection RuntimeSelection::current() const {
  MutexLock lock(&mu_);
  return recent_.back();
}

bool RuntimeSelection::changed() const {
  MutexLock lock(&mu_);
  return recent_.back().generation != 0;
}

std::vector<std::string> RuntimeSelection::takeJournal() {
  MutexLock lock(&mu_);
  std::vector<std::string> out = std::exchange(journal_, {});
  if (journal_dropped_ != 0) {
    nlohmann::json line = {{"lines_not_journalled", journal_dropped_},
                           {"reason", "more changes than the session thread could journal"}};
    out.push_back(line.dump() + "\n");
    journal_dropped_ = 0;
  }
  return out;
}

}  // namespace dumpd::daemon
