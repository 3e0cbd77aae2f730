// DumpPlan parsing in general: the defaults, the required keys and the order of the checks, JSON
// syntax errors, unsigned int keys, and loading the plan from a file or the environment.
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
