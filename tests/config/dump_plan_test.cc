#include "config/dump_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/config/config_test_util.h"

namespace dumpd::config {
namespace {

using ::testing::ElementsAre;
using testing::errorOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::minimalConfig;
using testing::parse;
using testing::parseWithCommon;
using testing::parseWithE2e;

// ---- defaults and the required keys

TEST(DumpPlanTest, MinimalConfigGetsEveryDefault) {
  auto plan = parse(minimalConfig());
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->dump_mode, DumpMode::kAll);
  EXPECT_EQ(plan->path, "/tmp/dumpd");
  EXPECT_EQ(plan->net_name, "Net");
  EXPECT_EQ(plan->iterations.toString(), "0");
  EXPECT_EQ(plan->input_output, IoSelect::kBoth);
  EXPECT_THAT(plan->kernels, IsEmpty());
  EXPECT_THAT(plan->support_device, ElementsAre(0u));
  EXPECT_EQ(plan->op_debug_mode, 0u);
  EXPECT_EQ(plan->overflow_number, 0u);
  EXPECT_EQ(plan->saved_data, SavedData::kTensor);
  EXPECT_THAT(plan->statistic_category, IsEmpty());  // tensor: categories not read
  EXPECT_EQ(plan->file_format, FileFormat::kNpy);
  EXPECT_EQ(plan->initial_iteration, 0u);
  EXPECT_TRUE(plan->e2e_enable);
  EXPECT_TRUE(plan->trans_flag);
  EXPECT_FALSE(plan->save_kernel_args);
  EXPECT_EQ(plan->stat_calc_mode, StatCalcMode::kHost);
  EXPECT_TRUE(plan->device_stat_precision_high);
  EXPECT_FALSE(plan->sample_mode);
  EXPECT_EQ(plan->sample_num, 100u);
  EXPECT_THAT(plan->warnings, IsEmpty());
}

TEST(DumpPlanTest, KeepsConfigTextByteForByte) {
  std::string text =
      "{ \"common_dump_settings\" : {\"dump_mode\":0,\"path\":\"/x\",\"net_name\":\"N\","
      "\"iteration\":\"all\",\"input_output\":0,\"kernels\":[],\"support_device\":[]} ,"
      "\"z\":1.50}\n\n";
  auto plan = parseDumpPlan(text, Environment{});
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->config_text, text);
}

TEST(DumpPlanTest, Utf8ByteOrderMarkIsAccepted) {
  // Editors on some systems write one; nlohmann-json (and so MindSpore) skips it.
  std::string text = "\xEF\xBB\xBF" + minimalConfig().dump();
  auto plan = parseDumpPlan(text, Environment{});
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->config_text, text);
}

TEST(DumpPlanTest, MissingCommonDumpSettingsIsNotFound) {
  EXPECT_EQ(errorOf(parseDumpPlan("{}", Environment{})),
            "Check dump json failed, common_dump_settings not found");
}

TEST(DumpPlanTest, EachRequiredKeyMissingIsNamed) {
  for (const char* key :
       {"dump_mode", "net_name", "iteration", "input_output", "kernels", "support_device"}) {
    auto config = minimalConfig();
    config["common_dump_settings"].erase(key);
    EXPECT_EQ(errorOf(parse(config)), std::string("Check dump json failed, ") + key + " not found")
        << key;
  }
}

TEST(DumpPlanTest, RequiredKeysAreCheckedInMindSporeOrder) {
  // Everything missing: the first required key in MindSpore's order is reported.
  auto config = nlohmann::json::parse(R"({"common_dump_settings": {}})");
  EXPECT_EQ(errorOf(parse(config)), "Check dump json failed, dump_mode not found");
  // A present-but-bad dump_mode is reported only after every required key is known present.
  config = nlohmann::json::parse(R"({"common_dump_settings": {"dump_mode": 7}})");
  EXPECT_EQ(errorOf(parse(config)), "Check dump json failed, net_name not found");
}

TEST(DumpPlanTest, E2eSettingsAreCheckedBeforeCommonSettings) {
  auto config = minimalConfig();
  config["common_dump_settings"]["dump_mode"] = 9;
  config["e2e_dump_settings"]["trans_flag"] = "yes";
  EXPECT_EQ(errorOf(parse(config)),
            "Dump Json Parse Failed. 'trans_flag' should be boolean type, but got: yes");
}

TEST(DumpPlanTest, ChecksFollowMindSporeOrderAcrossKeys) {
  auto config = minimalConfig();
  auto& c = config["common_dump_settings"];
  c["statistic_category"] = {"bogus"};
  c["saved_data"] = "full";
  c["initial_iteration"] = -1;
  c["file_format"] = "txt";
  c["op_debug_mode"] = 9;
  c["support_device"] = {-1};
  c["kernels"] = "x";
  c["input_output"] = 5;
  c["iteration"] = "x";
  c["net_name"] = "a.b";
  c["path"] = "rel";
  c["dump_mode"] = 3;
  // Remove the first failing key each time; the next one in order must be reported.
  const std::vector<std::pair<std::string, std::string>> order = {
      {"dump_mode", "dump_mode should be"},
      {"path", "Dump path only support absolute path"},
      {"net_name", "net_name only supports"},
      {"iteration", "iteration only supports"},
      {"input_output", "input_output should be"},
      {"kernels", "kernels should be array type"},
      {"support_device", "support_device should be unsigned int type"},
      {"op_debug_mode", "op_debug_mode should be 0, 3, 4"},
      {"file_format", "'file_format' should be either"},
      {"initial_iteration", "initial_iteration should be unsigned int type"},
      {"statistic_category", "statistic_category is invalid"},
  };
  const nlohmann::json fixes = nlohmann::json::parse(R"({
    "dump_mode": 0, "path": "/p", "net_name": "N", "iteration": "1", "input_output": 0,
    "kernels": [], "support_device": [1], "op_debug_mode": 0, "file_format": "npy",
    "initial_iteration": 0, "statistic_category": ["max"]})");
  for (const auto& [key, expected] : order) {
    EXPECT_THAT(errorOf(parse(config)), HasSubstr(expected)) << "expected " << key << " first";
    c[key] = fixes[key];
  }
  EXPECT_TRUE(parse(config)) << errorOf(parse(config));
}

TEST(DumpPlanTest, UnknownKeysAreIgnoredAtEveryLevel) {
  auto config = minimalConfig();
  config["something_new"] = {1, 2};
  config["common_dump_settings"]["not_a_key"] = "x";
  config["e2e_dump_settings"]["future"] = nullptr;
  EXPECT_TRUE(parse(config)) << errorOf(parse(config));
}

TEST(DumpPlanTest, RootMustBeAnObject) {
  EXPECT_THAT(errorOf(parseDumpPlan("[]", Environment{})),
              HasSubstr("the dump json should be an object, but got: []"));
  EXPECT_THAT(errorOf(parseDumpPlan("\"x\"", Environment{})), HasSubstr("but got: x"));
}

TEST(DumpPlanTest, SectionsMustBeObjects) {
  EXPECT_EQ(errorOf(parseDumpPlan(R"({"common_dump_settings": []})", Environment{})),
            "Dump config parse failed, common_dump_settings should be object type, but got: []");
  auto config = minimalConfig();
  config["e2e_dump_settings"] = 1;
  EXPECT_EQ(errorOf(parse(config)),
            "Dump config parse failed, e2e_dump_settings should be object type, but got: 1");
}

// ---- JSON syntax

TEST(DumpPlanTest, SyntaxErrorGivesLineAndColumn) {
  auto r = parseDumpPlan("{\n  \"common_dump_settings\": {\n    \"dump_mode\": 0,\n  }\n}",
                         Environment{});
  EXPECT_EQ(errorOf(r),
            "JSON syntax error at line 4, column 3: syntax error while parsing object key - "
            "unexpected '}'; expected string literal");
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidConfig);
}

TEST(DumpPlanTest, SyntaxErrorColumnCountsFromLineStart) {
  EXPECT_THAT(errorOf(parseDumpPlan("{\"a\": 1,\n   x}", Environment{})),
              HasSubstr("JSON syntax error at line 2, column 4: "));
  EXPECT_THAT(errorOf(parseDumpPlan("", Environment{})),
              HasSubstr("JSON syntax error at line 1, column 1: "));
  EXPECT_THAT(errorOf(parseDumpPlan("{\"a\": [1,\n\n", Environment{})),
              HasSubstr("JSON syntax error at line 3, column 1: "));
}

TEST(DumpPlanTest, SyntaxErrorNeverEchoesRawControlBytes) {
  auto r = parseDumpPlan("{\"a\": \"\x01\x1b[2J\"}", Environment{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message.find('\x1b'), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find('\x01'), std::string::npos) << r.error().message;
}

TEST(DumpPlanTest, DeeplyNestedValueIsRejectedWithoutExhaustingTheStack) {
  std::string deep = std::string(200000, '[') + std::string(200000, ']');
  std::string text = R"({"common_dump_settings": {"dump_mode": )" + deep +
                     R"(, "net_name": "N", "iteration": "0", "input_output": 0, "kernels": [],
                        "support_device": []}})";
  auto r = parseDumpPlan(text, Environment{});
  EXPECT_THAT(errorOf(r), HasSubstr("dump_mode should be unsigned int type, but got: [[[[...]]]]"));
  EXPECT_LT(errorOf(r).size(), 200u);
}

// ---- unsigned int keys

TEST(DumpPlanTest, UnsignedIntRejectsNegativeFloatAndString) {
  for (const char* key : {"dump_mode", "input_output", "op_debug_mode", "initial_iteration"}) {
    EXPECT_EQ(errorOf(parseWithCommon(key, -1)), std::string("Dump config parse failed, ") + key +
                                                     " should be unsigned int type, but got: -1");
    EXPECT_EQ(errorOf(parseWithCommon(key, 1.0)), std::string("Dump config parse failed, ") + key +
                                                      " should be unsigned int type, but got: 1.0");
    EXPECT_EQ(errorOf(parseWithCommon(key, "1")), std::string("Dump config parse failed, ") + key +
                                                      " should be unsigned int type, but got: 1");
    EXPECT_THAT(errorOf(parseWithCommon(key, true)), HasSubstr("but got: true"));
    EXPECT_THAT(errorOf(parseWithCommon(key, nullptr)), HasSubstr("but got: null"));
  }
}

TEST(DumpPlanTest, UnsignedIntMustFitIn32Bits) {
  EXPECT_EQ(errorOf(parseWithCommon("initial_iteration", 4294967296ull)),
            "Dump config parse failed, initial_iteration should be at most 4294967295, but got: "
            "4294967296");
  auto plan = parseWithCommon("initial_iteration", 4294967295ull);
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->initial_iteration, 4294967295u);
}

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

// ---- statistic_category

// The newer generation unless told: it knows every category.
Result<DumpPlan> parseCategories(const nlohmann::json& categories,
                                 const std::string& saved = "statistic",
                                 const std::string& ms_format = "2.7") {
  auto config = minimalConfig();
  config["common_dump_settings"]["saved_data"] = saved;
  config["common_dump_settings"]["statistic_category"] = categories;
  Environment env;
  env.dumpd_ms_format = ms_format;
  return parse(config, env);
}

TEST(DumpPlanTest, MsFormatDefaultsToTheReleasedGeneration) {
  auto plan = parse(minimalConfig());
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->ms_format, MsFormat::k26);
  Environment env;
  env.dumpd_ms_format = "2.7";
  EXPECT_EQ(parse(minimalConfig(), env)->ms_format, MsFormat::k27);
  env.dumpd_ms_format = "";
  EXPECT_EQ(parse(minimalConfig(), env)->ms_format, MsFormat::k26);
}

TEST(DumpPlanTest, UnknownMsFormatIsAnErrorNamingIt) {
  Environment env;
  env.dumpd_ms_format = "2.8";
  EXPECT_EQ(errorOf(parse(minimalConfig(), env)),
            "ms_format (client option ms_format or DUMPD_MS_FORMAT) should be \"2.6\" or \"2.7\", "
            "but got: 2.8");
}

TEST(DumpPlanTest, ReleasedGenerationRejectsHashCategoriesWithItsOwnList) {
  for (const char* hash : {"hash", "hash:sha1", "hash:md5"}) {
    EXPECT_EQ(errorOf(parseCategories({"max", hash}, "statistic", "2.6")),
              std::string("The following statistic_category is invalid: ") + hash +
                  ", the valid statistic_category are as follows: ['max', 'min', 'avg', "
                  "'count', 'negative zero count', 'positive zero count', 'nan count', "
                  "'negative inf count', 'positive inf count', 'zero count', 'md5', 'l2norm']");
  }
}

TEST(DumpPlanTest, ReleasedGenerationKeepsDuplicateCategories) {
  auto plan = parseCategories({"max", "md5", "max"}, "statistic", "2.6");
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_THAT(plan->statistic_category,
              ElementsAre(StatCategory::kMax, StatCategory::kMd5, StatCategory::kMax));
}

TEST(DumpPlanTest, StatisticCategoryDefaultsWhenStatisticsAreSaved) {
  for (const char* saved : {"statistic", "full"}) {
    auto plan = parseWithCommon("saved_data", saved);
    ASSERT_TRUE(plan) << errorOf(plan);
    EXPECT_THAT(plan->statistic_category,
                ElementsAre(StatCategory::kMax, StatCategory::kMin, StatCategory::kL2Norm));
  }
}

TEST(DumpPlanTest, StatisticCategoryIsNotReadForTensorDumps) {
  auto plan = parseCategories({"bogus"}, "tensor");
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_THAT(plan->statistic_category, IsEmpty());
  plan = parseCategories("not even an array", "tensor");
  EXPECT_TRUE(plan) << errorOf(plan);
}

TEST(DumpPlanTest, StatisticCategoryAcceptsEverySpelling) {
  auto plan = parseCategories({"max", "min", "avg", "count", "negative zero count",
                               "positive zero count", "nan count", "negative inf count",
                               "positive inf count", "zero count", "l2norm", "md5", "hash:sha1"});
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_THAT(
      plan->statistic_category,
      ElementsAre(StatCategory::kMax, StatCategory::kMin, StatCategory::kAvg, StatCategory::kCount,
                  StatCategory::kNegativeZeroCount, StatCategory::kPositiveZeroCount,
                  StatCategory::kNanCount, StatCategory::kNegativeInfCount,
                  StatCategory::kPositiveInfCount, StatCategory::kZeroCount, StatCategory::kL2Norm,
                  StatCategory::kMd5, StatCategory::kSha1));
}

TEST(DumpPlanTest, StatisticCategoryAliasesAndDuplicates) {
  auto plan = parseCategories({"hash", "min", "hash:sha1", "hash:md5", "md5", "min", "max"});
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_THAT(plan->statistic_category, ElementsAre(StatCategory::kSha1, StatCategory::kMin,
                                                    StatCategory::kMd5, StatCategory::kMax));
}

TEST(DumpPlanTest, StatisticCategoryEmptyIsAllowed) {
  auto plan = parseCategories(nlohmann::json::array());
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_THAT(plan->statistic_category, IsEmpty());
}

TEST(DumpPlanTest, StatisticCategoryUnknownListsInvalidAndValid) {
  EXPECT_EQ(errorOf(parseCategories({"max", "Max", "mean", 3})),
            "The following statistic_category is invalid: Max, mean, 3, the valid "
            "statistic_category are as follows: ['max', 'min', 'avg', 'count', 'negative zero "
            "count', 'positive zero count', 'nan count', 'negative inf count', 'positive inf "
            "count', 'zero count', 'md5', 'l2norm', 'hash', 'hash:sha1', 'hash:md5']");
}

TEST(DumpPlanTest, StatisticCategoryMustBeArray) {
  EXPECT_EQ(errorOf(parseCategories("max")),
            "Dump config parse failed, statistic_category should be array type, but got: max");
}

TEST(DumpPlanTest, DeviceStatisticsKeepOnlyDeviceCategories) {
  auto config = minimalConfig();
  config["common_dump_settings"]["saved_data"] = "statistic";
  config["common_dump_settings"]["statistic_category"] = {"max", "count", "avg", "md5", "l2norm"};
  config["e2e_dump_settings"]["stat_calc_mode"] = "device";
  auto plan = parse(config);
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->stat_calc_mode, StatCalcMode::kDevice);
  EXPECT_THAT(plan->statistic_category,
              ElementsAre(StatCategory::kMax, StatCategory::kAvg, StatCategory::kL2Norm));
  EXPECT_THAT(plan->warnings, ElementsAre(HasSubstr("count, md5")));
}

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

// ---- statistic.csv naming

TEST(DumpPlanTest, StatCategoryHeadersAndNames) {
  EXPECT_EQ(statCategoryHeader(StatCategory::kMax), "Max Value");
  EXPECT_EQ(statCategoryHeader(StatCategory::kMin), "Min Value");
  EXPECT_EQ(statCategoryHeader(StatCategory::kAvg), "Avg Value");
  EXPECT_EQ(statCategoryHeader(StatCategory::kCount), "Count");
  EXPECT_EQ(statCategoryHeader(StatCategory::kNegativeZeroCount), "Negative Zero Count");
  EXPECT_EQ(statCategoryHeader(StatCategory::kPositiveZeroCount), "Positive Zero Count");
  EXPECT_EQ(statCategoryHeader(StatCategory::kNanCount), "NaN Count");
  EXPECT_EQ(statCategoryHeader(StatCategory::kNegativeInfCount), "Negative Inf Count");
  EXPECT_EQ(statCategoryHeader(StatCategory::kPositiveInfCount), "Positive Inf Count");
  EXPECT_EQ(statCategoryHeader(StatCategory::kZeroCount), "Zero Count");
  EXPECT_EQ(statCategoryHeader(StatCategory::kL2Norm), "L2Norm Value");
  EXPECT_EQ(statCategoryHeader(StatCategory::kMd5), "MD5");
  EXPECT_EQ(statCategoryHeader(StatCategory::kSha1), "SHA1");
  EXPECT_EQ(statCategoryName(StatCategory::kNegativeZeroCount), "negative zero count");
  EXPECT_EQ(statCategoryName(StatCategory::kSha1), "hash:sha1");
  // Every name parses back to its own category.
  for (int i = 0; i <= static_cast<int>(StatCategory::kSha1); ++i) {
    auto c = static_cast<StatCategory>(i);
    auto plan = parseCategories({std::string(statCategoryName(c))});
    ASSERT_TRUE(plan) << errorOf(plan);
    EXPECT_THAT(plan->statistic_category, ElementsAre(c));
  }
}

// ---- files and environment

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dumpd_config_test_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(DumpPlanTest, LoadDumpPlanReadsTheFile) {
  TempDir dir;
  std::string file = dir.write("data_dump.json", minimalConfig().dump());
  auto plan = loadDumpPlan(file, Environment{});
  ASSERT_TRUE(plan) << errorOf(plan);
  EXPECT_EQ(plan->config_text, minimalConfig().dump());
}

TEST(DumpPlanTest, LoadDumpPlanUsesMindsporeDumpConfigWhenNoPath) {
  TempDir dir;
  Environment env;
  env.mindspore_dump_config = dir.write("cfg.json", minimalConfig().dump());
  EXPECT_TRUE(loadDumpPlan("", env));
  auto missing = loadDumpPlan("", Environment{});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(missing.error().message, HasSubstr("MINDSPORE_DUMP_CONFIG"));
}

TEST(DumpPlanTest, ReadTextFileErrorsNameTheFile) {
  auto r = readTextFile("/nonexistent/dir/cfg.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(r.error().message, HasSubstr("/nonexistent/dir/cfg.json"));
  TempDir dir;
  auto d = readTextFile(dir.path());
  ASSERT_FALSE(d);
  EXPECT_THAT(d.error().message, HasSubstr(dir.path()));
}

TEST(DumpPlanTest, EnvironmentFromProcess) {
  ::setenv("MS_DIAGNOSTIC_DATA_PATH", "/diag/x", 1);
  ::unsetenv("MINDSPORE_DUMP_CONFIG");
  auto env = Environment::fromProcess();
  EXPECT_EQ(env.ms_diagnostic_data_path, "/diag/x");
  EXPECT_FALSE(env.mindspore_dump_config.has_value());
  ::unsetenv("MS_DIAGNOSTIC_DATA_PATH");
}

}  // namespace
}  // namespace dumpd::config
