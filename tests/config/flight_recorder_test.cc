// The job config's "flight_recorder" section (config/flight_recorder.h): defaults, every key,
// and errors that name the key and the value.
#include "config/flight_recorder.h"

#include <gtest/gtest.h>

#include <string>

namespace dumpd::config {
namespace {

using nlohmann::json;

Result<FlightRecorderPlan> parse(const std::string& text) {
  return parseFlightRecorder(json::parse(text));
}

// The error message of a section that must be refused.
std::string errorOf(const std::string& text) {
  auto r = parse(text);
  EXPECT_FALSE(r.has_value()) << text;
  if (r.has_value()) return "";
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidConfig);
  return r.error().message;
}

TEST(FlightRecorderConfig, AnEmptySectionTakesTheDocumentedDefaults) {
  auto r = parse("{}");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->steps, 4u);
  EXPECT_EQ(r->saved_data, SavedData::kFull);
  EXPECT_EQ(r->max_bytes, uint64_t{4} << 30);
  for (auto t :
       {RecorderTrigger::kNan, RecorderTrigger::kInf, RecorderTrigger::kLossSpike,
        RecorderTrigger::kCrash, RecorderTrigger::kManual, RecorderTrigger::kReplicaMismatch}) {
    EXPECT_TRUE(r->has(t)) << recorderTriggerName(t);
  }
  EXPECT_EQ(r->loss_window, 50u);
  EXPECT_EQ(r->loss_factor, 3.0);
  EXPECT_EQ(r->after_steps, 1u);
  EXPECT_EQ(r->max_triggers, 1u);
}

TEST(FlightRecorderConfig, EveryKeyIsRead) {
  auto r = parse(R"({"steps": 7, "saved_data": "statistic", "max_bytes": 2097152,
                     "triggers": ["inf", "manual"], "loss_spike": {"window": 9, "factor": 1.5},
                     "after_steps": 0, "max_triggers": 0})");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->steps, 7u);
  EXPECT_EQ(r->saved_data, SavedData::kStatistic);
  EXPECT_EQ(r->max_bytes, 2097152u);
  EXPECT_FALSE(r->has(RecorderTrigger::kNan));
  EXPECT_TRUE(r->has(RecorderTrigger::kInf));
  EXPECT_FALSE(r->has(RecorderTrigger::kLossSpike));
  EXPECT_FALSE(r->has(RecorderTrigger::kCrash));
  EXPECT_TRUE(r->has(RecorderTrigger::kManual));
  EXPECT_EQ(r->loss_window, 9u);
  EXPECT_EQ(r->loss_factor, 1.5);
  EXPECT_EQ(r->after_steps, 0u);
  EXPECT_EQ(r->max_triggers, 0u);
}

TEST(FlightRecorderConfig, ToJsonReadsBackAsTheSamePlan) {
  auto r = parse(R"({"steps": 3, "saved_data": "tensor", "triggers": ["crash"],
                     "loss_spike": {"factor": 2.25}, "max_triggers": 5})");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  auto again = parseFlightRecorder(r->toJson());
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->toJson(), r->toJson());
  EXPECT_EQ(r->toJson().at("triggers"), json::array({"crash"}));
  EXPECT_EQ(r->toJson().at("saved_data"), "tensor");
}

TEST(FlightRecorderConfig, IntegersOutOfRangeNameTheKeyAndValue) {
  EXPECT_EQ(errorOf(R"({"steps": 0})"),
            "flight_recorder.steps should be an integer from 1 to 1024, but got: 0");
  EXPECT_EQ(errorOf(R"({"steps": 1025})"),
            "flight_recorder.steps should be an integer from 1 to 1024, but got: 1025");
  EXPECT_EQ(errorOf(R"({"steps": -1})"),
            "flight_recorder.steps should be an integer from 1 to 1024, but got: -1");
  EXPECT_EQ(errorOf(R"({"steps": 2.0})"),
            "flight_recorder.steps should be an integer from 1 to 1024, but got: 2.0");
  EXPECT_EQ(errorOf(R"({"steps": "2"})"),
            "flight_recorder.steps should be an integer from 1 to 1024, but got: 2");
  EXPECT_NE(errorOf(R"({"max_bytes": 1048575})").find("flight_recorder.max_bytes"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"after_steps": 2000})").find("flight_recorder.after_steps"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"max_triggers": 4294967296})").find("flight_recorder.max_triggers"),
            std::string::npos);
  EXPECT_NE(errorOf(R"({"loss_spike": {"window": 1}})").find("flight_recorder.loss_spike.window"),
            std::string::npos);
}

TEST(FlightRecorderConfig, SavedDataAndFactorAreChecked) {
  EXPECT_EQ(errorOf(R"({"saved_data": "all"})"),
            "flight_recorder.saved_data should be \"tensor\", \"statistic\" or \"full\", but "
            "got: all");
  EXPECT_EQ(errorOf(R"({"loss_spike": {"factor": 1}})"),
            "flight_recorder.loss_spike.factor should be a number above 1, but got: 1");
  EXPECT_EQ(errorOf(R"({"loss_spike": {"factor": "3"}})"),
            "flight_recorder.loss_spike.factor should be a number above 1, but got: 3");
  EXPECT_EQ(errorOf(R"({"loss_spike": 3})"),
            "flight_recorder.loss_spike should be an object, but got: 3");
}

TEST(FlightRecorderConfig, TriggersMustBeKnownAndAtLeastOne) {
  EXPECT_EQ(errorOf(R"({"triggers": ["nan", "oom"]})"),
            "flight_recorder.triggers should be a list of \"nan\", \"inf\", \"loss_spike\", "
            "\"crash\", \"manual\", \"replica_mismatch\", but got: oom");
  auto only = parse(R"({"triggers": ["replica_mismatch"]})");
  ASSERT_TRUE(only.has_value()) << only.error().message;
  EXPECT_TRUE(only->has(RecorderTrigger::kReplicaMismatch));
  EXPECT_FALSE(only->has(RecorderTrigger::kManual));
  EXPECT_EQ(errorOf(R"({"triggers": []})"),
            "flight_recorder.triggers should be a list naming at least one trigger, but got: []");
  EXPECT_NE(errorOf(R"({"triggers": "nan"})").find("flight_recorder.triggers"), std::string::npos);
}

TEST(FlightRecorderConfig, UnknownKeysAreErrorsNamingThem) {
  EXPECT_EQ(errorOf(R"({"step": 4})"),
            "flight_recorder has an unknown key \"step\" (known: steps, saved_data, max_bytes, "
            "triggers, loss_spike, after_steps, max_triggers)");
  EXPECT_EQ(errorOf(R"({"loss_spike": {"windows": 4}})"),
            "flight_recorder.loss_spike has an unknown key \"windows\" (known: window, factor)");
  EXPECT_EQ(errorOf("[]"), "flight_recorder should be an object, but got: []");
}

TEST(FlightRecorderConfig, TheClientOptionReplacesTheFilesSection) {
  const std::string file = R"({"common_dump_settings": {"net_name": "Net"},
                               "flight_recorder": {"steps": 9}})";
  auto merged = withFlightRecorder(file, R"({"steps": 2, "triggers": ["manual"]})");
  ASSERT_TRUE(merged.has_value()) << merged.error().message;
  const json j = json::parse(*merged);
  EXPECT_EQ(j.at("flight_recorder"), json::parse(R"({"steps": 2, "triggers": ["manual"]})"));
  EXPECT_EQ(j.at("common_dump_settings").at("net_name"), "Net");

  auto added = withFlightRecorder(R"({"common_dump_settings": {}})", "{}");
  ASSERT_TRUE(added.has_value()) << added.error().message;
  EXPECT_EQ(json::parse(*added).at("flight_recorder"), json::object());
}

TEST(FlightRecorderConfig, ABadClientOptionIsReportedAsTheOption) {
  auto bad = withFlightRecorder("{}", R"({"steps": 0})");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message,
            "the flight_recorder option: flight_recorder.steps should be an integer from 1 to "
            "1024, but got: 0");
  auto not_json = withFlightRecorder("{}", "{steps");
  ASSERT_FALSE(not_json.has_value());
  EXPECT_EQ(not_json.error().message.rfind("the flight_recorder option is not JSON: ", 0), 0u)
      << not_json.error().message;
}

}  // namespace
}  // namespace dumpd::config
