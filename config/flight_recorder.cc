#include "config/flight_recorder.h"

#include <cmath>
#include <string>

#include "config/json_util.h"

namespace dumpd::config {
namespace {

using internal::describe;
using nlohmann::json;

constexpr std::string_view kTriggerNames[kRecorderTriggerCount] = {
    "nan", "inf", "loss_spike", "crash", "manual", "replica_mismatch"};

Error invalid(std::string_view key, std::string_view expected, const json& got) {
  return makeError(ErrorCode::kInvalidConfig, "flight_recorder" + std::string(key) + " should be " +
                                                  std::string(expected) +
                                                  ", but got: " + describe(got));
}

// A JSON integer in [lo, hi] (1.0, "1", true refused).
Result<uint64_t> getInteger(const json& v, std::string_view key, uint64_t lo, uint64_t hi) {
  const std::string range = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  if (!v.is_number_integer()) return invalid(key, range, v);
  if (v.is_number_unsigned()) {
    const uint64_t n = v.get<uint64_t>();
    if (n < lo || n > hi) return invalid(key, range, v);
    return n;
  }
  const int64_t n = v.get<int64_t>();
  if (n < 0 || static_cast<uint64_t>(n) < lo || static_cast<uint64_t>(n) > hi) {
    return invalid(key, range, v);
  }
  return static_cast<uint64_t>(n);
}

Status checkKeys(const json& object, std::string_view prefix,
                 std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || key == k;
    if (!ok) {
      std::string list;
      for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return makeError(ErrorCode::kInvalidConfig,
                       "flight_recorder" + std::string(prefix) + " has an unknown key \"" +
                           internal::printable(key) + "\" (known: " + list + ")");
    }
  }
  return {};
}

Status parseLossSpike(const json& v, FlightRecorderPlan& plan) {
  if (!v.is_object()) return invalid(".loss_spike", "an object", v);
  if (Status s = checkKeys(v, ".loss_spike", {"window", "factor"}); !s) return s;
  if (auto it = v.find("window"); it != v.end()) {
    auto n = getInteger(*it, ".loss_spike.window", 2, FlightRecorderPlan::kMaxLossWindow);
    if (!n) return n.error();
    plan.loss_window = static_cast<uint32_t>(*n);
  }
  if (auto it = v.find("factor"); it != v.end()) {
    const char* expected = "a number above 1";
    if (!it->is_number()) return invalid(".loss_spike.factor", expected, *it);
    const double f = it->get<double>();
    if (!std::isfinite(f) || f <= 1.0) return invalid(".loss_spike.factor", expected, *it);
    plan.loss_factor = f;
  }
  return {};
}

Status parseTriggers(const json& v, FlightRecorderPlan& plan) {
  const char* expected =
      "a list of \"nan\", \"inf\", \"loss_spike\", \"crash\", \"manual\", "
      "\"replica_mismatch\"";
  if (!v.is_array()) return invalid(".triggers", expected, v);
  plan.triggers = 0;
  for (const json& t : v) {
    bool found = false;
    for (size_t i = 0; i < kRecorderTriggerCount; ++i) {
      if (t.is_string() && t.get<std::string>() == kTriggerNames[i]) {
        plan.triggers |= 1u << i;
        found = true;
      }
    }
    if (!found) return invalid(".triggers", expected, t);
  }
  if (plan.triggers == 0) return invalid(".triggers", "a list naming at least one trigger", v);
  return {};
}

}  // namespace

std::string_view recorderTriggerName(RecorderTrigger t) {
  return kTriggerNames[static_cast<size_t>(t)];
}

Result<FlightRecorderPlan> parseFlightRecorder(const json& section) {
  FlightRecorderPlan plan;
  if (!section.is_object()) return invalid("", "an object", section);
  if (Status s = checkKeys(section, "",
                           {"steps", "saved_data", "max_bytes", "triggers", "loss_spike",
                            "after_steps", "max_triggers"});
      !s) {
    return s.error();
  }
  if (auto it = section.find("steps"); it != section.end()) {
    auto n = getInteger(*it, ".steps", 1, FlightRecorderPlan::kMaxSteps);
    if (!n) return n.error();
    plan.steps = static_cast<uint32_t>(*n);
  }
  if (auto it = section.find("saved_data"); it != section.end()) {
    const char* expected = "\"tensor\", \"statistic\" or \"full\"";
    if (!it->is_string()) return invalid(".saved_data", expected, *it);
    const std::string s = it->get<std::string>();
    if (s == "tensor") {
      plan.saved_data = SavedData::kTensor;
    } else if (s == "statistic") {
      plan.saved_data = SavedData::kStatistic;
    } else if (s == "full") {
      plan.saved_data = SavedData::kFull;
    } else {
      return invalid(".saved_data", expected, *it);
    }
  }
  if (auto it = section.find("max_bytes"); it != section.end()) {
    auto n = getInteger(*it, ".max_bytes", FlightRecorderPlan::kMinMaxBytes, UINT64_MAX);
    if (!n) return n.error();
    plan.max_bytes = *n;
  }
  if (auto it = section.find("triggers"); it != section.end()) {
    if (Status s = parseTriggers(*it, plan); !s) return s.error();
  }
  if (auto it = section.find("loss_spike"); it != section.end()) {
    if (Status s = parseLossSpike(*it, plan); !s) return s.error();
  }
  if (auto it = section.find("after_steps"); it != section.end()) {
    auto n = getInteger(*it, ".after_steps", 0, FlightRecorderPlan::kMaxSteps);
    if (!n) return n.error();
    plan.after_steps = static_cast<uint32_t>(*n);
  }
  if (auto it = section.find("max_triggers"); it != section.end()) {
    auto n = getInteger(*it, ".max_triggers", 0, UINT32_MAX);
    if (!n) return n.error();
    plan.max_triggers = static_cast<uint32_t>(*n);
  }
  return plan;
}

Result<std::string> withFlightRecorder(std::string_view config_text, std::string_view section) {
  auto option = internal::parseJson(section);
  if (!option) {
    return makeError(ErrorCode::kInvalidConfig,
                     "the flight_recorder option is not JSON: " + option.error().message);
  }
  if (auto plan = parseFlightRecorder(*option); !plan) {
    return makeError(ErrorCode::kInvalidConfig,
                     "the flight_recorder option: " + plan.error().message);
  }
  auto root = internal::parseJson(config_text);
  if (!root) return root.error();
  if (!root->is_object()) {
    return makeError(
        ErrorCode::kInvalidConfig,
        "Dump config parse failed, the dump json should be an object, but got: " + describe(*root));
  }
  (*root)["flight_recorder"] = std::move(*option);
  return root->dump(2);
}

nlohmann::json FlightRecorderPlan::toJson() const {
  static constexpr const char* kData[] = {"tensor", "statistic", "full"};
  json triggers_list = json::array();
  for (size_t i = 0; i < kRecorderTriggerCount; ++i) {
    if (has(static_cast<RecorderTrigger>(i))) triggers_list.push_back(kTriggerNames[i]);
  }
  return json{{"steps", steps},
              {"saved_data", kData[static_cast<size_t>(saved_data)]},
              {"max_bytes", max_bytes},
              {"triggers", triggers_list},
              {"loss_spike", {{"window", loss_window}, {"factor", loss_factor}}},
              {"after_steps", after_steps},
              {"max_triggers", max_triggers}};
}

}  // namespace dumpd::config
