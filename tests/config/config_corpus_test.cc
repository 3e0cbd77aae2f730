// Replays every job config under tests/config/data/ (and the shipped examples) through
// parseDumpPlan. The file name says what must happen: valid_* parse, invalid_* fail. An
// invalid_X.err file holds text the error must contain; a valid_X.summary file holds the
// expected summarizePlan() line. Parsing must never crash, whatever the input: the same
// inputs, truncated at every byte, are replayed too.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "config/dump_plan.h"
#include "tests/config/config_test_util.h"

namespace dumpd::config {
namespace {

namespace fs = std::filesystem;
using testing::errorOf;
using ::testing::HasSubstr;

const fs::path kDataDir = fs::path(DUMPD_SOURCE_DIR) / "tests/config/data";
const fs::path kExamplesDir = fs::path(DUMPD_SOURCE_DIR) / "config/examples";

std::vector<std::string> jsonFilesIn(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string readOrEmpty(const fs::path& p) {
  auto text = readTextFile(p.string());
  return text ? *text : std::string();
}

std::string trimNewline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// The corpus runs with MS_DIAGNOSTIC_DATA_PATH=/diag so path-less configs can be valid.
Environment corpusEnv() {
  Environment env;
  // The corpus spells every category, the hash ones included: the newer generation's.
  env.dumpd_ms_format = "2.7";
  env.ms_diagnostic_data_path = "/diag";
  return env;
}

class ConfigCorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigCorpusTest, OutcomeMatchesFileName) {
  const std::string& name = GetParam();
  const fs::path file = kDataDir / name;
  auto text = readTextFile(file.string());
  ASSERT_TRUE(text) << errorOf(text);
  auto plan = parseDumpPlan(*text, corpusEnv());
  const std::string stem = file.stem().string();
  if (name.starts_with("valid_")) {
    ASSERT_TRUE(plan) << name << ": " << errorOf(plan);
    EXPECT_EQ(plan->config_text, *text);
    fs::path summary = kDataDir / (stem + ".summary");
    if (fs::exists(summary)) {
      EXPECT_EQ(summarizePlan(*plan), trimNewline(readOrEmpty(summary))) << name;
    }
  } else {
    ASSERT_TRUE(name.starts_with("invalid_")) << name << ": name must start valid_ or invalid_";
    ASSERT_FALSE(plan) << name << " parsed: " << summarizePlan(*plan);
    EXPECT_EQ(plan.error().code, ErrorCode::kInvalidConfig) << name;
    fs::path expected = kDataDir / (stem + ".err");
    ASSERT_TRUE(fs::exists(expected)) << "every invalid_ file needs a .err: " << name;
    EXPECT_THAT(plan.error().message, HasSubstr(trimNewline(readOrEmpty(expected)))) << name;
  }
}

TEST_P(ConfigCorpusTest, EveryTruncationParsesWithoutCrashing) {
  auto text = readTextFile((kDataDir / GetParam()).string());
  ASSERT_TRUE(text);
  // Trailing whitespace is not part of the value: cutting it off leaves a complete document.
  while (!text->empty() && std::isspace(static_cast<unsigned char>(text->back()))) {
    text->pop_back();
  }
  size_t step = std::max<size_t>(1, text->size() / 512);  // bounded work for large files
  for (size_t n = 0; n < text->size(); n += step) {
    auto plan = parseDumpPlan(std::string_view(*text).substr(0, n), corpusEnv());
    // A strict prefix of a JSON object is never a complete object.
    EXPECT_FALSE(plan) << GetParam() << " truncated to " << n << " bytes parsed";
  }
}

TEST_P(ConfigCorpusTest, EveryByteFlipParsesWithoutCrashing) {
  auto text = readTextFile((kDataDir / GetParam()).string());
  ASSERT_TRUE(text);
  size_t step = std::max<size_t>(1, text->size() / 1024);  // bounded work for large files
  for (size_t i = 0; i < text->size(); i += step) {
    for (char c : {'\0', '"', '{', '-', '9', '\xff'}) {
      std::string mutated = *text;
      mutated[i] = c;
      auto plan = parseDumpPlan(mutated, corpusEnv());
      if (plan) (void)summarizePlan(*plan);  // a plan that parses must also summarise
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Data, ConfigCorpusTest, ::testing::ValuesIn(jsonFilesIn(kDataDir)),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = fs::path(info.param).stem().string();
                           std::replace_if(
                               n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

TEST(ConfigCorpusFilesTest, CorpusHasBothKinds) {
  auto names = jsonFilesIn(kDataDir);
  EXPECT_GE(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) { return n.starts_with("valid_"); }),
            10);
  EXPECT_GE(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) { return n.starts_with("invalid_"); }),
            40);
}

TEST(ConfigExamplesTest, EveryShippedExampleIsValid) {
  auto names = jsonFilesIn(kExamplesDir);
  EXPECT_THAT(names, ::testing::IsSupersetOf({"all_ops.json", "kernels.json",
                                              "statistics_only.json", "overflow.json"}));
  for (const std::string& name : names) {
    auto plan = loadDumpPlan((kExamplesDir / name).string(), Environment{});
    EXPECT_TRUE(plan) << name << ": " << errorOf(plan);
    if (plan) {
      EXPECT_TRUE(plan->warnings.empty()) << name << ": " << plan->warnings.front();
    }
  }
}

TEST(ConfigExamplesTest, ExamplesMeanWhatTheirNamesSay) {
  auto all = loadDumpPlan((kExamplesDir / "all_ops.json").string(), Environment{});
  ASSERT_TRUE(all);
  EXPECT_EQ(all->dump_mode, DumpMode::kAll);
  auto kernels = loadDumpPlan((kExamplesDir / "kernels.json").string(), Environment{});
  ASSERT_TRUE(kernels);
  EXPECT_EQ(kernels->dump_mode, DumpMode::kKernels);
  auto stats = loadDumpPlan((kExamplesDir / "statistics_only.json").string(), Environment{});
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->saved_data, SavedData::kStatistic);
  auto overflow = loadDumpPlan((kExamplesDir / "overflow.json").string(), Environment{});
  ASSERT_TRUE(overflow);
  EXPECT_EQ(overflow->op_debug_mode, 3u);
}

}  // namespace
}  // namespace dumpd::config
