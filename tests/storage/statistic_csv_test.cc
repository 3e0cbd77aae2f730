#include "storage/statistic_csv.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace dumpd::storage {
namespace {

using config::StatCategory;

const std::vector<StatCategory> kDefault = {StatCategory::kMax, StatCategory::kMin,
                                            StatCategory::kL2Norm};

TEST(StatisticCsvTest, HeaderWithDefaultCategories) {
  EXPECT_EQ(statisticCsvHeader(kDefault),
            "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
            "Max Value,Min Value,L2Norm Value\n");
}

TEST(StatisticCsvTest, HeaderWithNoCategoriesHasTheTenFixedColumns) {
  EXPECT_EQ(statisticCsvHeader({}),
            "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape\n");
}

TEST(StatisticCsvTest, HeaderKeepsConfigOrder) {
  std::vector<StatCategory> c = {StatCategory::kSha1, StatCategory::kCount,
                                 StatCategory::kNegativeZeroCount, StatCategory::kMd5};
  EXPECT_EQ(statisticCsvHeader(c),
            "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
            "SHA1,Count,Negative Zero Count,MD5\n");
}

TEST(StatisticCsvTest, RowEndsEveryFieldWithCommaAndKeepsFullName) {
  TensorStats s;
  s.max = 6;
  s.min = 1;
  s.l2norm = 9.539392;
  std::vector<int64_t> shape = {2, 3};
  std::string row;
  appendStatisticRow(
      row,
      {"Add", "Default/Add-op0", 0, 0, 1700000000000001, Io::kInput, 0, 24, DType::kFloat32, shape},
      s, kDefault, config::MsFormat::k27);
  EXPECT_EQ(row,
            "Add,Default/Add-op0,0,0,1700000000000001,input,0,24,float32,\"[2,3]\",6,1,9.53939,\n");
}

TEST(StatisticCsvTest, ReleasedGenerationSanitizesTheNameAndParenthesizesTheShape) {
  // MindSpore 2.6's row for the same tensor (its system test checks "(3)" for a 1-D shape).
  TensorStats s;
  s.max = 6;
  s.min = 1;
  s.l2norm = 9.539392;
  std::string row;
  for (std::vector<int64_t> shape : {std::vector<int64_t>{2, 3}, {3}, {}}) {
    appendStatisticRow(
        row, {"Add", "Default/net.a b/Add-op0", 0, 0, 7, Io::kInput, 0, 24, DType::kFloat32, shape},
        s, kDefault, config::MsFormat::k26);
  }
  EXPECT_EQ(row,
            "Add,Default_net_a_b_Add-op0,0,0,7,input,0,24,float32,\"(2,3)\",6,1,9.53939,\n"
            "Add,Default_net_a_b_Add-op0,0,0,7,input,0,24,float32,\"(3)\",6,1,9.53939,\n"
            "Add,Default_net_a_b_Add-op0,0,0,7,input,0,24,float32,\"()\",6,1,9.53939,\n");
  row.clear();
  std::vector<int64_t> one = {3};
  appendStatisticRow(row,
                     {"Add", "Default/Add-op0", 0, 0, 7, Io::kInput, 0, 12, DType::kFloat32, one},
                     s, kDefault, config::MsFormat::k27);
  EXPECT_EQ(row, "Add,Default/Add-op0,0,0,7,input,0,12,float32,\"[3]\",6,1,9.53939,\n");
}

TEST(StatisticCsvTest, RowWithEveryCategory) {
  TensorStats s;
  s.count = 4;
  s.max = std::numeric_limits<double>::quiet_NaN();
  s.min = -std::numeric_limits<double>::infinity();
  s.avg = 1234567;
  s.negative = 1;
  s.positive = 2;
  s.nan = 3;
  s.negative_inf = 4;
  s.positive_inf = 5;
  s.zero = 6;
  s.l2norm = 0.5;
  s.md5.fill(0xab);
  s.sha1.fill(0x01);
  std::vector<StatCategory> all = {
      StatCategory::kMax,
      StatCategory::kMin,
      StatCategory::kAvg,
      StatCategory::kCount,
      StatCategory::kNegativeZeroCount,
      StatCategory::kPositiveZeroCount,
      StatCategory::kNanCount,
      StatCategory::kNegativeInfCount,
      StatCategory::kPositiveInfCount,
      StatCategory::kZeroCount,
      StatCategory::kL2Norm,
      StatCategory::kMd5,
      StatCategory::kSha1,
  };
  std::string row;
  appendStatisticRow(row, {"T", "N", 1, 2, 3, Io::kOutput, 4, 0, DType::kBool, {}}, s, all,
                     config::MsFormat::k27);
  EXPECT_EQ(row,
            "T,N,1,2,3,output,4,0,bool,\"[]\",nan,-inf,1.23457e+06,4,1,2,3,4,5,6,0.5,"
            "abababababababababababababababab,0101010101010101010101010101010101010101,\n");
}

TEST(StatisticCsvTest, FieldsWithCommaQuoteOrNewlineAreQuoted) {
  TensorStats s;
  std::string row;
  appendStatisticRow(row, {"A,B", "x\"y\nz", 0, 0, 0, Io::kOutput, 0, 4, DType::kFloat32, {}}, s,
                     {}, config::MsFormat::k27);
  EXPECT_EQ(row, "\"A,B\",\"x\"\"y\nz\",0,0,0,output,0,4,float32,\"[]\",\n");
}

TEST(StatisticCsvTest, StatOptionsComputeOnlyWhatIsAsked) {
  StatOptions hash_only = statOptionsFor(std::vector<StatCategory>{StatCategory::kMd5});
  EXPECT_FALSE(hash_only.values);
  EXPECT_TRUE(hash_only.md5);
  EXPECT_FALSE(hash_only.sha1);
  StatOptions d = statOptionsFor(kDefault);
  EXPECT_TRUE(d.values);
  EXPECT_FALSE(d.md5);
  EXPECT_FALSE(d.sha1);
}

}  // namespace
}  // namespace dumpd::storage
