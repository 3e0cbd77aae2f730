// The job config's "flight_recorder" section, a dumpd extension (MindSpore has no such key and
// ignores it): keep the iterations `iteration` does not select, write the last `steps` of them
// when something goes wrong (docs/recorder.md).
//
//   "flight_recorder": {"steps": 4, "saved_data": "full", "max_bytes": 4294967296,
//                       "triggers": ["nan", "inf", "loss_spike", "crash", "manual",
//                                    "replica_mismatch"],
//                       "loss_spike": {"window": 50, "factor": 3.0},
//                       "after_steps": 1, "max_triggers": 1}
//
// Every key is optional (the defaults are the example's). Unlike MindSpore's own sections, an
// unknown key here is an error: a misspelt trigger must not silently record nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "config/saved_data.h"

namespace dumpd::config {

enum class RecorderTrigger : uint8_t { kNan, kInf, kLossSpike, kCrash, kManual, kReplicaMismatch };
inline constexpr size_t kRecorderTriggerCount = 6;

// "nan", "inf", "loss_spike", "crash", "manual", "replica_mismatch".
std::string_view recorderTriggerName(RecorderTrigger t);

struct FlightRecorderPlan {
  static constexpr uint32_t kMaxSteps = 1024;
  static constexpr uint32_t kMaxLossWindow = 10000;
  static constexpr uint64_t kMinMaxBytes = uint64_t{1} << 20;

  uint32_t steps = 4;                       // iterations kept, the triggering one included
  SavedData saved_data = SavedData::kFull;  // what a trigger writes of them
  uint64_t max_bytes = uint64_t{4} << 30;   // bytes kept at most
  uint32_t triggers = 0x3f;                 // bit (1 << RecorderTrigger)
  uint32_t loss_window = 50;                // losses the median is taken over
  double loss_factor = 3.0;                 // a loss above factor x median triggers
  uint32_t after_steps = 1;                 // iterations written after the trigger
  uint32_t max_triggers = 1;                // 0: no limit

  bool has(RecorderTrigger t) const { return (triggers >> static_cast<unsigned>(t)) & 1u; }
  // The section as JSON, every key present (status, .dump_metadata).
  nlohmann::json toJson() const;
};

// Reads the "flight_recorder" value of a job config. Errors (kInvalidConfig) name the key
// ("flight_recorder.loss_spike.factor") and the value.
Result<FlightRecorderPlan> parseFlightRecorder(const nlohmann::json& section);

// The job config `config_text` with its "flight_recorder" section replaced by `section` (JSON
// text: the client option, which wins over the file). The section is checked here, so a bad
// option is reported as the option's; the rest of the config is checked by parseDumpPlan.
Result<std::string> withFlightRecorder(std::string_view config_text, std::string_view section);

}  // namespace dumpd::config
