#include "config/filter.h"

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

Filter makeFilter(const nlohmann::json& config) {
  auto plan = parse(config);
  EXPECT_TRUE(plan) << errorOf(plan);
  auto filter = Filter::create(*plan);
  EXPECT_TRUE(filter) << errorOf(filter);
  return std::move(filter).value();
}

nlohmann::json configWith(const nlohmann::json& common_overrides) {
  auto config = minimalConfig();
  for (const auto& [key, value] : common_overrides.items()) {
    config["common_dump_settings"][key] = value;
  }
  return config;
}

TEST(FilterTest, DeviceMustBeListed) {
  auto f = makeFilter(configWith({{"support_device", {3, 1}}}));
  EXPECT_TRUE(f.deviceSelected(1));
  EXPECT_TRUE(f.deviceSelected(3));
  EXPECT_FALSE(f.deviceSelected(0));
  EXPECT_FALSE(f.deviceSelected(2));
}

TEST(FilterTest, EmptySupportDeviceDumpsNothing) {
  auto f = makeFilter(configWith({{"support_device", nlohmann::json::array()}}));
  EXPECT_FALSE(f.deviceSelected(0));
  EXPECT_FALSE(f.shouldDump(0, 0, "Default/Add-op0", Io::kOutput));
}

TEST(FilterTest, IterationIsTheRealCounterValue) {
  // initial_iteration is only where the producer's counter starts: "10" means the step whose
  // counter reads 10, not the 10th step after the start.
  auto f = makeFilter(configWith({{"iteration", "10|20-21"}, {"initial_iteration", 10}}));
  EXPECT_TRUE(f.iterationSelected(10));
  EXPECT_TRUE(f.iterationSelected(21));
  EXPECT_FALSE(f.iterationSelected(0));
  EXPECT_FALSE(f.iterationSelected(11));
  EXPECT_FALSE(f.iterationSelected(31));
}

TEST(FilterTest, IterationAll) {
  auto f = makeFilter(configWith({{"iteration", "all"}}));
  EXPECT_TRUE(f.iterationSelected(0));
  EXPECT_TRUE(f.iterationSelected(123456));
}

TEST(FilterTest, IoSelection) {
  auto both = makeFilter(configWith({{"input_output", 0}}));
  EXPECT_TRUE(both.ioSelected(Io::kInput));
  EXPECT_TRUE(both.ioSelected(Io::kOutput));
  auto inputs = makeFilter(configWith({{"input_output", 1}}));
  EXPECT_TRUE(inputs.ioSelected(Io::kInput));
  EXPECT_FALSE(inputs.ioSelected(Io::kOutput));
  auto outputs = makeFilter(configWith({{"input_output", 2}}));
  EXPECT_FALSE(outputs.ioSelected(Io::kInput));
  EXPECT_TRUE(outputs.ioSelected(Io::kOutput));
}

TEST(FilterTest, DumpModeAllSelectsEveryOp) {
  auto f = makeFilter(configWith({{"dump_mode", 0}, {"kernels", {"conv"}}}));
  EXPECT_TRUE(f.opSelected("Default/MatMul-op1"));
  EXPECT_TRUE(f.opSelected("Default/MatMul-op1", /*marked=*/false));
  EXPECT_TRUE(f.unusedKernels().empty());  // kernels are not used in mode 0
}

TEST(FilterTest, DumpModeKernelsUsesTheList) {
  auto f = makeFilter(configWith({{"dump_mode", 1}, {"kernels", {"conv", "Default/Add-op0"}}}));
  EXPECT_TRUE(f.opSelected("Default/Conv2D-op3"));
  EXPECT_TRUE(f.opSelected("Default/Add-op0"));
  EXPECT_FALSE(f.opSelected("Default/Add-op1"));
  EXPECT_FALSE(f.opSelected("Default/MatMul-op1", /*marked=*/true));  // marks do not matter
}

TEST(FilterTest, DumpModeKernelsWithEmptyListSelectsEveryOp) {
  auto f = makeFilter(configWith({{"dump_mode", 1}, {"kernels", {"", " "}}}));
  EXPECT_TRUE(f.opSelected("Default/Anything-op1"));
}

TEST(FilterTest, DumpModeMarkedUsesTheMark) {
  auto f = makeFilter(configWith({{"dump_mode", 2}, {"kernels", {"conv"}}}));
  EXPECT_TRUE(f.opSelected("Default/MatMul-op1", /*marked=*/true));
  EXPECT_FALSE(f.opSelected("Default/Conv2D-op1", /*marked=*/false));
}

TEST(FilterTest, OverflowModeForcesAllOps) {
  auto f = makeFilter(configWith({{"dump_mode", 1}, {"kernels", {"conv"}}, {"op_debug_mode", 3}}));
  EXPECT_TRUE(f.opSelected("Default/MatMul-op1"));
}

TEST(FilterTest, CachedAnswerIsTheSameAnswer) {
  auto f = makeFilter(configWith({{"dump_mode", 1}, {"kernels", {"conv"}}}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(f.opSelected("Default/Conv2D-op1"));
    EXPECT_FALSE(f.opSelected("Default/MatMul-op1"));
  }
  // A name that is a prefix of a cached one is its own entry.
  EXPECT_FALSE(f.opSelected("Default/Co"));
  EXPECT_TRUE(f.opSelected(std::string_view("Default/Conv2D-op1XYZ", 18)));
}

TEST(FilterTest, ManyDistinctNamesStayCorrectPastTheCacheBound) {
  auto f = makeFilter(configWith({{"dump_mode", 1}, {"kernels", {"conv"}}}));
  for (int i = 0; i < 70000; ++i) {
    std::string name =
        "Default/" + std::string(i % 2 ? "Conv2D" : "Add") + "-op" + std::to_string(i);
    ASSERT_EQ(f.opSelected(name), i % 2 == 1) << name;
  }
  EXPECT_TRUE(f.opSelected("Default/Conv2D-op69999"));
  EXPECT_FALSE(f.opSelected("Default/Add-op69998"));
}

TEST(FilterTest, UnusedKernelsReportsEntriesThatNeverMatched) {
  auto f = makeFilter(
      configWith({{"dump_mode", 1}, {"kernels", {"conv", "Default/Add-op0", "name-regex(X.*)"}}}));
  f.opSelected("Default/Conv2D-op1");
  f.opSelected("Default/Conv2D-op1");
  EXPECT_THAT(f.unusedKernels(), ElementsAre("Default/Add-op0", "name-regex(X.*)"));
  EXPECT_EQ(f.matcher().size(), 3u);
}

TEST(FilterTest, ShouldDumpCombinesEveryRule) {
  auto f = makeFilter(configWith({{"dump_mode", 1},
                                  {"kernels", {"conv"}},
                                  {"support_device", {0}},
                                  {"iteration", "2-3"},
                                  {"input_output", 2}}));
  EXPECT_TRUE(f.shouldDump(0, 2, "Default/Conv2D-op1", Io::kOutput));
  EXPECT_FALSE(f.shouldDump(1, 2, "Default/Conv2D-op1", Io::kOutput));  // device
  EXPECT_FALSE(f.shouldDump(0, 4, "Default/Conv2D-op1", Io::kOutput));  // iteration
  EXPECT_FALSE(f.shouldDump(0, 2, "Default/Conv2D-op1", Io::kInput));   // io
  EXPECT_FALSE(f.shouldDump(0, 2, "Default/Add-op1", Io::kOutput));     // kernel
}

TEST(FilterTest, CreateRejectsABadRegexInAHandBuiltPlan) {
  DumpPlan plan;
  plan.dump_mode = DumpMode::kKernels;
  plan.kernels = {"name-regex(()"};
  auto f = Filter::create(plan);
  EXPECT_THAT(errorOf(f), HasSubstr("name-regex(()"));
}

}  // namespace
}  // namespace dumpd::config
