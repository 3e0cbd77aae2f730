// DumpPlan parsing of the common_dump_settings keys from dump_mode to initial_iteration, and the
// values op_debug_mode forces (statistic_category: dump_plan_statistics_test.cc).
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
using testing::parseWithCommon;

// ---- dump_mode

TEST(DumpPlanTest, DumpModeValues) {
  EXPECT_EQ(parseWithCommon("dump_mode", 0)->dump_mode, DumpMode::kAll);
  EXPECT_EQ(parseWithCommon("dump_mode", 1)->dump_mode, DumpMode::kKernels);
  EXPECT_EQ(parseWithCommon("dump_mode", 2)->dump_mode, DumpMode::kMarked);
  EXPECT_EQ(errorOf(parseWithCommon("dump_mode", 3)),
            "Dump config parse failed, dump_mode should be 0, 1 or 2, but got 3");
}

// ---- path

TEST(DumpPlanTest, PathFallsBackToDiagnosticDataPathWhenAbsent) {
  auto config = minimalConfig();
  config["common_dump_settings"].erase("path");
  Environment env;
  env.ms_diagnostic_data_path = "/diag";
  auto plan = parse(config, env);
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->path, "/diag/debug_dump");
}

TEST(DumpPlanTest, PathFallsBackToDiagnosticDataPathWhenEmpty) {
  auto config = minimalConfig();
  config["common_dump_settings"]["path"] = "";
  Environment env;
  env.ms_diagnostic_data_path = "/diag";
  auto plan = parse(config, env);
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->path, "/diag/debug_dump");
}

TEST(DumpPlanTest, ExplicitPathWinsOverEnvironment) {
  Environment env;
  env.ms_diagnostic_data_path = "/diag";
  EXPECT_EQ(parse(minimalConfig(), env)->path, "/tmp/dumpd");
}

TEST(DumpPlanTest, PathEmptyEverywhereIsAnError) {
  const std::string expected =
      "Dump path is empty. Please set it in dump json file or environment variable "
      "MS_DIAGNOSTIC_DATA_PATH.";
  auto config = minimalConfig();
  config["common_dump_settings"].erase("path");
  EXPECT_EQ(errorOf(parse(config)), expected);
  Environment empty_env;
  empty_env.ms_diagnostic_data_path = "";
  EXPECT_EQ(errorOf(parse(config, empty_env)), expected);
  config["common_dump_settings"]["path"] = "";
  EXPECT_EQ(errorOf(parse(config, empty_env)), expected);
}

TEST(DumpPlanTest, PathFromRelativeEnvironmentIsRejected) {
  auto config = minimalConfig();
  config["common_dump_settings"].erase("path");
  Environment env;
  env.ms_diagnostic_data_path = "diag";
  EXPECT_EQ(errorOf(parse(config, env)),
            "Dump path only support absolute path and should start with '/', but got: "
            "diag/debug_dump");
}

TEST(DumpPlanTest, PathMustBeAbsolute) {
  EXPECT_EQ(errorOf(parseWithCommon("path", "tmp/dump")),
            "Dump path only support absolute path and should start with '/', but got: tmp/dump");
}

TEST(DumpPlanTest, PathAcceptsDotAsDumpdDeviation) {
  auto plan = parseWithCommon("path", "/data/run.1/../x_y-z");
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->path, "/data/run.1/../x_y-z");
}

TEST(DumpPlanTest, PathRejectsCharactersOutsideTheAllowedSet) {
  for (const char* bad : {"/tmp/a b", "/tmp/a:b", "/tmp/é", "/tmp/a*b", "/tmp/a\\b"}) {
    EXPECT_THAT(errorOf(parseWithCommon("path", bad)),
                HasSubstr("Dump path only support alphabets, digit or {'-', '_', '/', '.'}, but "
                          "got: "))
        << bad;
  }
}

TEST(DumpPlanTest, PathRejectsControlCharacters) {
  EXPECT_EQ(errorOf(parseWithCommon("path", "/tmp/a\nb")),
            "Dump path must not contain control characters, but got: /tmp/a\\x0ab");
  EXPECT_EQ(errorOf(parseWithCommon("path", "/tmp/\x7f")),
            "Dump path must not contain control characters, but got: /tmp/\\x7f");
  EXPECT_THAT(errorOf(parseWithCommon("path", std::string("/tmp/a\0b", 8))),
              HasSubstr("control characters"));
}

TEST(DumpPlanTest, PathMustBeString) {
  EXPECT_EQ(errorOf(parseWithCommon("path", 1)),
            "Dump config parse failed, path should be string type, but got: 1");
}

// ---- net_name

TEST(DumpPlanTest, NetNameAllowsAlnumDashUnderscore) {
  EXPECT_EQ(parseWithCommon("net_name", "Res_Net-50")->net_name, "Res_Net-50");
}

TEST(DumpPlanTest, NetNameRejectsEmptyAndOtherCharacters) {
  EXPECT_EQ(errorOf(parseWithCommon("net_name", "")),
            "net_name only supports alphabetic, digit, or {'-', '_'}, but got: ");
  for (const char* bad : {"a.b", "a/b", "a b", "..", "a\tb"}) {
    EXPECT_THAT(errorOf(parseWithCommon("net_name", bad)),
                HasSubstr("net_name only supports alphabetic, digit, or {'-', '_'}, but got: "))
        << bad;
  }
  EXPECT_EQ(errorOf(parseWithCommon("net_name", 5)),
            "Dump config parse failed, net_name should be string type, but got: 5");
}

TEST(DumpPlanTest, NetNameIsAtMostADirectoryNameLong) {
  // Issue 48: a 2 MiB net name was accepted (and kept in dumpd's per-job accounts).
  EXPECT_EQ(parseWithCommon("net_name", std::string(255, 'n'))->net_name, std::string(255, 'n'));
  EXPECT_EQ(errorOf(parseWithCommon("net_name", std::string(256, 'n'))),
            "net_name is 256 characters long; it names a directory of the dump tree, which "
            "holds at most 255 (got \"" +
                std::string(32, 'n') + "...\")");
  EXPECT_THAT(errorOf(parseWithCommon("net_name", std::string(2 << 20, 'x'))),
              HasSubstr("net_name is 2097152 characters long"));
}

// ---- iteration

TEST(DumpPlanTest, IterationIsParsedAsSet) {
  auto plan = parseWithCommon("iteration", "0 | 5-8 | 100-120");
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->iterations.toString(), "0|5-8|100-120");
  EXPECT_TRUE(parseWithCommon("iteration", "all")->iterations.isAll());
}

TEST(DumpPlanTest, IterationErrorsAreReported) {
  EXPECT_EQ(errorOf(parseWithCommon("iteration", "1,2")),
            "iteration only supports digits, {'-', '|'}, or just \"all\" but got: 1,2");
  EXPECT_THAT(errorOf(parseWithCommon("iteration", "8-5")), HasSubstr("\"8-5\""));
  EXPECT_EQ(errorOf(parseWithCommon("iteration", 0)),
            "Dump config parse failed, iteration should be string type, but got: 0");
}

// ---- input_output

TEST(DumpPlanTest, InputOutputValues) {
  EXPECT_EQ(parseWithCommon("input_output", 0)->input_output, IoSelect::kBoth);
  EXPECT_EQ(parseWithCommon("input_output", 1)->input_output, IoSelect::kInputs);
  EXPECT_EQ(parseWithCommon("input_output", 2)->input_output, IoSelect::kOutputs);
  EXPECT_EQ(errorOf(parseWithCommon("input_output", 3)),
            "Dump Json Parse Failed. input_output should be 0, 1, 2, but got: 3");
}

// ---- kernels

TEST(DumpPlanTest, KernelsAreKeptAsWritten) {
  auto config = minimalConfig();
  config["common_dump_settings"]["dump_mode"] = 1;
  config["common_dump_settings"]["kernels"] = {" \"Conv\" ", "", "Default/Add-op1"};
  auto plan = parse(config);
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_THAT(plan->kernels, ElementsAre(" \"Conv\" ", "", "Default/Add-op1"));
}

TEST(DumpPlanTest, KernelsMustBeArrayOfStrings) {
  EXPECT_EQ(errorOf(parseWithCommon("kernels", "Conv")),
            "Dump config parse failed, kernels should be array type, but got: Conv");
  EXPECT_EQ(errorOf(parseWithCommon("kernels", {"Conv", 3})),
            "Dump config parse failed, kernels should be an array of strings, but got: 3");
}

TEST(DumpPlanTest, InvalidRegexIsAnErrorOnlyInKernelMode) {
  auto config = minimalConfig();
  config["common_dump_settings"]["kernels"] = {"name-regex(Default/[)"};
  EXPECT_TRUE(parse(config)) << "dump_mode 0 does not compile kernels (as MindSpore)";
  config["common_dump_settings"]["dump_mode"] = 1;
  EXPECT_EQ(errorOf(parse(config)),
            "Dump config parse failed, kernels entry \"name-regex(Default/[)\": unsupported "
            "regular expression: missing ]: [ (dumpd uses RE2 syntax, see "
            "docs/compatibility.md)");
}

// ---- support_device

TEST(DumpPlanTest, SupportDeviceIsSortedAndDeduplicated) {
  auto plan = parseWithCommon("support_device", {7, 0, 3, 0});
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_THAT(plan->support_device, ElementsAre(0u, 3u, 7u));
  EXPECT_TRUE(plan->supportsDevice(3));
  EXPECT_FALSE(plan->supportsDevice(1));
}

TEST(DumpPlanTest, SupportDeviceMayBeEmpty) {
  auto plan = parseWithCommon("support_device", nlohmann::json::array());
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_FALSE(plan->supportsDevice(0));
}

TEST(DumpPlanTest, SupportDeviceRejectsNonArrayAndBadItems) {
  EXPECT_EQ(errorOf(parseWithCommon("support_device", 0)),
            "Dump config parse failed, support_device should be array type, but got: 0");
  EXPECT_EQ(errorOf(parseWithCommon("support_device", {0, -1})),
            "Dump config parse failed, support_device should be unsigned int type, but got: -1");
  EXPECT_THAT(errorOf(parseWithCommon("support_device", {"0"})),
              HasSubstr("support_device should be unsigned int type, but got: 0"));
}

// ---- op_debug_mode and its forced values

TEST(DumpPlanTest, OpDebugModeOneAndTwoBecomeThree) {
  for (int m : {1, 2}) {
    auto plan = parseWithCommon("op_debug_mode", m);
    ASSERT_TRUE(plan) << errorOf(plan);
    EXPECT_EQ(plan->op_debug_mode, 3u);
    EXPECT_THAT(plan->warnings, ElementsAre(HasSubstr("treated as 3")));
  }
}

TEST(DumpPlanTest, OpDebugModeRejectsOtherValues) {
  EXPECT_EQ(errorOf(parseWithCommon("op_debug_mode", 5)),
            "Dump Json Parse Failed. op_debug_mode should be 0, 3, 4, but got: 5");
}

TEST(DumpPlanTest, NonZeroOpDebugModeForcesDumpModeZero) {
  for (int m : {3, 4}) {
    auto config = minimalConfig();
    config["common_dump_settings"]["dump_mode"] = 1;
    config["common_dump_settings"]["kernels"] = {"Conv"};
    config["common_dump_settings"]["op_debug_mode"] = m;
    auto plan = parse(config);
    ASSERT_TRUE(plan) << errorOf(plan);
    EXPECT_EQ(plan->dump_mode, DumpMode::kAll) << m;
  }
}

TEST(DumpPlanTest, OpDebugModeThreeForcesInputOutputZero) {
  auto config = minimalConfig();
  config["common_dump_settings"]["input_output"] = 2;
  config["common_dump_settings"]["op_debug_mode"] = 3;
  auto plan = parse(config);
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->input_output, IoSelect::kBoth);
  EXPECT_THAT(plan->warnings, ElementsAre(HasSubstr("input_output 2 is set to 0")));
}

TEST(DumpPlanTest, OpDebugModeFourKeepsInputOutput) {
  auto config = minimalConfig();
  config["common_dump_settings"]["input_output"] = 1;
  config["common_dump_settings"]["op_debug_mode"] = 4;
  EXPECT_EQ(parse(config)->input_output, IoSelect::kInputs);
}

TEST(DumpPlanTest, OpDebugModeFourForcesAllIterationsTensorAndNoSampling) {
  auto config = minimalConfig();
  config["common_dump_settings"]["op_debug_mode"] = 4;
  config["common_dump_settings"]["iteration"] = "3";
  config["common_dump_settings"]["saved_data"] = "full";
  config["e2e_dump_settings"]["sample_mode"] = 1;
  auto plan = parse(config);
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_TRUE(plan->iterations.isAll());
  EXPECT_EQ(plan->saved_data, SavedData::kTensor);
  EXPECT_FALSE(plan->sample_mode);
  EXPECT_EQ(plan->warnings.size(), 3u);
}

TEST(DumpPlanTest, ZeroOpDebugModeForcesNothing) {
  auto config = minimalConfig();
  config["common_dump_settings"]["dump_mode"] = 1;
  config["common_dump_settings"]["input_output"] = 2;
  config["common_dump_settings"]["op_debug_mode"] = 0;
  auto plan = parse(config);
  EXPECT_EQ(plan->dump_mode, DumpMode::kKernels);
  EXPECT_EQ(plan->input_output, IoSelect::kOutputs);
}

// ---- overflow_number

TEST(DumpPlanTest, OverflowNumberOnlyWithOpDebugModeThree) {
  auto config = minimalConfig();
  config["common_dump_settings"]["overflow_number"] = 5;
  EXPECT_EQ(errorOf(parse(config)),
            "overflow_number only need to be set when op_debug_mode is 3. (got overflow_number: 5 "
            "with op_debug_mode: 0)");
  config["common_dump_settings"]["op_debug_mode"] = 4;
  EXPECT_THAT(errorOf(parse(config)), HasSubstr("op_debug_mode: 4"));
  config["common_dump_settings"]["op_debug_mode"] = 3;
  auto plan = parse(config);
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->overflow_number, 5u);
  config["common_dump_settings"]["op_debug_mode"] = 2;  // becomes 3 first
  EXPECT_EQ(parse(config)->overflow_number, 5u);
  config["common_dump_settings"]["overflow_number"] = -5;
  EXPECT_EQ(errorOf(parse(config)),
            "Dump config parse failed, overflow_number should be unsigned int type, but got: -5");
}

// ---- file_format

TEST(DumpPlanTest, FileFormatValues) {
  EXPECT_EQ(parseWithCommon("file_format", "npy")->file_format, FileFormat::kNpy);
  EXPECT_EQ(parseWithCommon("file_format", "bin")->file_format, FileFormat::kBin);
  EXPECT_EQ(errorOf(parseWithCommon("file_format", "NPY")),
            "Dump Json Parse Failed. 'file_format' should be either 'npy' or 'bin', but got: NPY");
  EXPECT_EQ(errorOf(parseWithCommon("file_format", 1)),
            "Dump config parse failed, file_format should be string type, but got: 1");
}

// MindSpore refuses statistics with bin files; dumpd writes statistic.csv beside them
// (docs/compatibility.md).
TEST(DumpPlanTest, BinFormatKeepsStatistics) {
  for (const char* saved : {"statistic", "full"}) {
    auto config = minimalConfig();
    config["common_dump_settings"]["file_format"] = "bin";
    config["common_dump_settings"]["saved_data"] = saved;
    auto plan = parse(config);
    ASSERT_TRUE(plan.has_value()) << saved;
    EXPECT_EQ(plan->file_format, FileFormat::kBin);
    EXPECT_TRUE(plan->savesStatistics()) << saved;
  }
}

// ---- saved_data

TEST(DumpPlanTest, SavedDataValues) {
  auto tensor = parseWithCommon("saved_data", "tensor");
  EXPECT_TRUE(tensor->savesTensors());
  EXPECT_FALSE(tensor->savesStatistics());
  auto statistic = parseWithCommon("saved_data", "statistic");
  EXPECT_FALSE(statistic->savesTensors());
  EXPECT_TRUE(statistic->savesStatistics());
  auto full = parseWithCommon("saved_data", "full");
  EXPECT_TRUE(full->savesTensors());
  EXPECT_TRUE(full->savesStatistics());
  EXPECT_EQ(errorOf(parseWithCommon("saved_data", "both")),
            "Dump Json parse failed, saved_data only supports statistic, tensor, or full, but got: "
            "both. Please set saved_data to either statistic, tensor, or full");
}

// ---- initial_iteration

TEST(DumpPlanTest, InitialIteration) {
  EXPECT_EQ(parseWithCommon("initial_iteration", 7)->initial_iteration, 7u);
  EXPECT_THAT(errorOf(parseWithCommon("initial_iteration", "7")),
              HasSubstr("initial_iteration should be unsigned int type, but got: 7"));
}

}  // namespace
}  // namespace dumpd::config
