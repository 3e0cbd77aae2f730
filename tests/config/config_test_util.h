// Helpers for the config tests: a minimal valid job config to edit key by key.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "config/dump_plan.h"

namespace dumpd::config::testing {

// The smallest valid job config: every required key, nothing optional.
inline nlohmann::json minimalConfig() {
  return nlohmann::json::parse(R"({
    "common_dump_settings": {
      "dump_mode": 0,
      "path": "/tmp/dumpd",
      "net_name": "Net",
      "iteration": "0",
      "input_output": 0,
      "kernels": [],
      "support_device": [0]
    }
  })");
}

inline Environment noEnv() { return Environment{}; }

inline Result<DumpPlan> parse(const nlohmann::json& config, const Environment& env = noEnv()) {
  return parseDumpPlan(config.dump(), env);
}

// Parses minimalConfig() with common_dump_settings[key] = value.
inline Result<DumpPlan> parseWithCommon(const std::string& key, const nlohmann::json& value) {
  auto config = minimalConfig();
  config["common_dump_settings"][key] = value;
  return parse(config);
}

inline Result<DumpPlan> parseWithE2e(const std::string& key, const nlohmann::json& value) {
  auto config = minimalConfig();
  config["e2e_dump_settings"][key] = value;
  return parse(config);
}

// The error message, or "<valid>" so a failing EXPECT shows what happened.
template <typename T>
std::string errorOf(const Result<T>& r) {
  return r.has_value() ? std::string("<valid>") : r.error().message;
}

}  // namespace dumpd::config::testing
