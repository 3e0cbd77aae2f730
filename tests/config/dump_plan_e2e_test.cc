// DumpPlan parsing of the e2e_dump_settings keys, and the one-line plan summary.
#include "config/dump_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/config/config_test_util.h"

namespace dumpd::config {
namespace {

using ::testing::ElementsAre;
using testing::errorOf;
using ::testing::HasSubstr;
using testing::minimalConfig;
using testing::parse;
using testing::parseWithE2e;

// ---- e2e_dump_settings

TEST(DumpPlanTest, BooleanKeys) {
  EXPECT_FALSE(parseWithE2e("enable", false)->e2e_enable);
  EXPECT_FALSE(parseWithE2e("trans_flag", false)->trans_flag);
  EXPECT_TRUE(parseWithE2e("save_kernel_args", true)->save_kernel_args);
  for (const char* key : {"enable", "trans_flag", "save_kernel_args"}) {
    for (const nlohmann::json& bad :
         {nlohmann::json(1), nlohmann::json("true"), nlohmann::json(nullptr)}) {
      EXPECT_EQ(errorOf(parseWithE2e(key, bad)), std::string("Dump Json Parse Failed. '") + key +
                                                     "' should be boolean type, but got: " +
                                                     (bad.is_string() ? "true" : bad.dump()));
    }
  }
}

TEST(DumpPlanTest, StatCalcMode) {
  EXPECT_EQ(parseWithE2e("stat_calc_mode", "host")->stat_calc_mode, StatCalcMode::kHost);
  EXPECT_EQ(errorOf(parseWithE2e("stat_calc_mode", "cpu")),
            "Dump Json parse failed, 'stat_calc_mode' only supports 'host' or 'device', but got: "
            "cpu. Please set 'stat_calc_mode' to 'host' or 'device'");
  EXPECT_EQ(errorOf(parseWithE2e("stat_calc_mode", 0)),
            "Dump config parse failed, stat_calc_mode should be string type, but got: 0");
}

TEST(DumpPlanTest, DeviceStatCalcModeIsForcedToHostWhenTensorsAreSaved) {
  for (const char* saved : {"tensor", "full"}) {
    auto config = minimalConfig();
    config["common_dump_settings"]["saved_data"] = saved;
    config["e2e_dump_settings"]["stat_calc_mode"] = "device";
    auto plan = parse(config);
    ASSERT_TRUE(plan) << errorOf(plan);
    EXPECT_EQ(plan->stat_calc_mode, StatCalcMode::kHost) << saved;
    EXPECT_THAT(plan->warnings, ElementsAre(HasSubstr("stat_calc_mode is set to 'host'")));
  }
}

TEST(DumpPlanTest, DeviceStatCalcModeIsForcedToHostForOverflowWithoutEnable) {
  auto config = minimalConfig();
  config["common_dump_settings"]["saved_data"] = "statistic";
  config["common_dump_settings"]["op_debug_mode"] = 3;
  config["e2e_dump_settings"]["stat_calc_mode"] = "device";
  config["e2e_dump_settings"]["enable"] = false;
  EXPECT_EQ(parse(config)->stat_calc_mode, StatCalcMode::kHost);
  config["e2e_dump_settings"]["enable"] = true;
  EXPECT_EQ(parse(config)->stat_calc_mode, StatCalcMode::kDevice);
}

TEST(DumpPlanTest, DeviceStatPrecisionMode) {
  EXPECT_TRUE(parseWithE2e("device_stat_precision_mode", "high")->device_stat_precision_high);
  EXPECT_FALSE(parseWithE2e("device_stat_precision_mode", "low")->device_stat_precision_high);
  EXPECT_EQ(errorOf(parseWithE2e("device_stat_precision_mode", "medium")),
            "Dump Json parse failed, 'device_stat_precision_mode' only supports 'high' or 'low', "
            "but got: medium. Please set 'device_stat_precision_mode' to 'high' or 'low'");
}

TEST(DumpPlanTest, SampleModeAndNum) {
  EXPECT_FALSE(parseWithE2e("sample_mode", 0)->sample_mode);
  EXPECT_TRUE(parseWithE2e("sample_mode", 1)->sample_mode);
  EXPECT_EQ(errorOf(parseWithE2e("sample_mode", 2)),
            "Dump Json Parse Failed. sample_mode should be 0, 1, but got: 2");
  EXPECT_THAT(errorOf(parseWithE2e("sample_mode", -1)),
              HasSubstr("sample_mode should be unsigned int type, but got: -1"));

  auto config = minimalConfig();
  config["e2e_dump_settings"]["sample_mode"] = 1;
  config["e2e_dump_settings"]["sample_num"] = 10;
  EXPECT_EQ(parse(config)->sample_num, 10u);
  config["e2e_dump_settings"]["sample_num"] = 0;
  EXPECT_EQ(errorOf(parse(config)),
            "Dump Json Parse Failed. sample_num should be greater than 0, but got: 0");
  config["e2e_dump_settings"]["sample_num"] = "10";
  EXPECT_EQ(errorOf(parse(config)),
            "Dump config parse failed, sample_num should be unsigned int type, but got: 10");
  // Without sampling, sample_num is not read at all (MindSpore ignores it too).
  config["e2e_dump_settings"]["sample_mode"] = 0;
  auto plan = parse(config);
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->sample_num, 100u);
}

// ---- summary

TEST(DumpPlanTest, SummaryIsOneLine) {
  auto config = minimalConfig();
  auto& c = config["common_dump_settings"];
  c["path"] = "/tmp/x";
  c["iteration"] = "5-8|0";
  c["dump_mode"] = 1;
  c["kernels"] = {"Conv", "Default/Add-op1", "name-regex(.+)", ""};
  c["saved_data"] = "full";
  EXPECT_EQ(summarizePlan(*parse(config)),
            "net=Net path=/tmp/x iterations=0|5-8 dump_mode=1 (3 kernels) saved_data=full "
            "categories=max,min,l2norm");
}

TEST(DumpPlanTest, SummaryMentionsOverflowAndBin) {
  auto config = minimalConfig();
  config["common_dump_settings"]["op_debug_mode"] = 3;
  config["common_dump_settings"]["file_format"] = "bin";
  EXPECT_EQ(summarizePlan(*parse(config)),
            "net=Net path=/tmp/dumpd iterations=0 dump_mode=0 saved_data=tensor op_debug_mode=3 "
            "file_format=bin");
}

}  // namespace
}  // namespace dumpd::config
