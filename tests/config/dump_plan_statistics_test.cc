// DumpPlan parsing of statistic_category in both MindSpore generations (ms_format), and the
// names and statistic.csv headers of the categories.
#include "config/dump_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dumpd::config
