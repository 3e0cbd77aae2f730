// The job-config reader behind parseDumpPlan (config/dump_plan.h); not a public API. One
// class, in two files: plan_parser.cc (the document, the e2e settings, the common settings up
// to op_debug_mode) and plan_parser_statistics.cc (file format, overflow, saved data and the
// statistic categories).
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "config/dump_plan.h"

namespace dumpd::config::internal {

using nlohmann::json;

inline Error invalid(std::string message) {
  return makeError(ErrorCode::kInvalidConfig, std::move(message));
}

inline std::string notFound(std::string_view key) {
  return "Check dump json failed, " + std::string(key) + " not found";
}

// The reader of one job config. Each step checks one key in MindSpore's order and either
// fills plan_ or returns the error for that key; the first error wins.
class PlanParser {
 public:
  PlanParser(std::string_view text, const Environment& env) : env_(env) {
    plan_.config_text = std::string(text);
  }

  Result<DumpPlan> run();

 private:
  // "unsigned int": a JSON non-negative integer that fits in uint32 (-1, 1.0, "1" rejected).
  static Result<uint32_t> getUint(const json& v, std::string_view key);
  static Result<std::string> getString(const json& v, std::string_view key);
  static Result<bool> getBool(const json& v, std::string_view key);
  static Status checkArray(const json& v, std::string_view key);

  Status parseE2eSettings(const json& root);
  Status parseDumpMode(const json& v);
  Status parsePath(const json& common);
  Status parseNetName(const json& v);
  Status parseIteration(const json& v);
  Status parseInputOutput(const json& v);
  Status parseKernels(const json& v);
  Status parseSupportDevice(const json& v);
  Status parseOpDebugMode(const json& common);
  Status parseFileFormat(const json& common);
  Status parseOverflowNumber(const json& common);
  Status parseSavedData(const json& common);
  Status parseInitialIteration(const json& common);
  void checkStatCalcMode();
  Status parseStatisticCategory(const json& common);

  void warn(std::string message) { plan_.warnings.push_back(std::move(message)); }

  const Environment& env_;
  DumpPlan plan_;
};

}  // namespace dumpd::config::internal
