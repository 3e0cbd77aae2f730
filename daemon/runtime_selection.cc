#include "daemon/runtime_selection.h"

#include <nlohmann/json.hpp>

#include "config/iteration_set.h"

namespace dumpd::daemon {
namespace {

nlohmann::json toJson(const Selection& s) {
  return {{"iteration", s.iteration}, {"paused", s.paused}, {"recorder_on", s.recorder_on}};
}

}  // namespace

RuntimeSelection::RuntimeSelection(Selection initial, bool has_recorder)
    : has_recorder_(has_recorder) {
  initial.generation = 0;
  recent_.push_back(std::move(initial));
}

Result<Selection> RuntimeSelection::change(const v1::ControlChange& change, uint32_t uid,
                                           uint64_t time_us, std::string_view reason) {
  std::string iteration;
  if (change.has_iteration()) {
    auto set = config::IterationSet::parse(change.iteration());
    if (!set) return set.error();
    iteration = set.value().toString();
  }
  if (change.has_recorder_on() && !has_recorder_) {
    return makeError(ErrorCode::kInvalidConfig,
                     "the job has no flight recorder to turn on or off (the job config's "
                     "flight_recorder)");
  }
  if (!change.has_iteration() && !change.has_paused() && !change.has_recorder_on()) {
    return makeError(ErrorCode::kInvalidArgument, "nothing to change");
  }
  MutexLock lock(&mu_);
  const Selection old = recent_.back();
  Selection next = old;
  ++next.generation;
  if (change.has_iteration()) next.iteration = std::move(iteration);
  if (change.has_paused()) next.paused = change.paused();
  if (change.has_recorder_on()) next.recorder_on = change.recorder_on();
  recent_.push_back(next);
  // The initial selection stays: it is what generation 0 means.
  while (recent_.size() > kMaxKept) recent_.erase(recent_.begin() + 1);
  nlohmann::json line = {{"time_us", time_us},
                         {"uid", uid},
                         {"generation", next.generation},
                         {"old", toJson(old)},
                         {"new", toJson(next)}};
  if (!reason.empty()) line["reason"] = std::string(reason);
  journal_.push_back(line.dump() + "\n");
  return next;
}

std::optional<Selection> RuntimeSelection::find(uint64_t generation) const {
  MutexLock lock(&mu_);
  for (const Selection& s : recent_) {
    if (s.generation == generation) return s;
  }
  return std::nullopt;
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
  return std::exchange(journal_, {});
}

}  // namespace dumpd::daemon
