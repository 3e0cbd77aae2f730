#include "storage/format/statistic_csv.h"

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

// The reader takes back what the writer wrote, in either generation.
TEST(StatisticCsvTest, ReaderReadsBackWhatTheWriterWrote) {
  const std::vector<StatCategory> cats = {StatCategory::kMax, StatCategory::kMin,
                                          StatCategory::kAvg, StatCategory::kL2Norm};
  for (config::MsFormat format : {config::MsFormat::k26, config::MsFormat::k27}) {
    TensorStats s;
    s.max = 6;
    s.min = -1.5;
    s.avg = 2.25;
    s.l2norm = 9.53939;
    const std::vector<int64_t> shape = {2, 3};
    StatRow row{.op_type = "Add",
                .op_name = "Default/Add-op0",
                .task_id = 7,
                .stream_id = 2,
                .timestamp_us = 123456,
                .io = Io::kInput,
                .slot = 1,
                .data_size = 24,
                .dtype = DType::kFloat32,
                .shape = shape};
    std::string text = statisticCsvHeader(cats);
    appendStatisticRow(text, row, s, cats, format);
    auto read = parseStatisticCsv(text, "statistic.csv");
    ASSERT_TRUE(read) << read.error().message;
    ASSERT_EQ(read->rows.size(), 1u);
    EXPECT_EQ(read->bad_rows, 0u);
    const StatisticCsvRow& r = read->rows[0];
    EXPECT_EQ(r.line, 2u);
    EXPECT_EQ(r.op_type, "Add");
    EXPECT_EQ(r.op_name, "Default_Add-op0");  // sanitised whichever generation wrote it
    EXPECT_EQ(r.task_id, 7u);
    EXPECT_EQ(r.stream_id, 2u);
    EXPECT_EQ(r.timestamp, 123456u);
    EXPECT_EQ(r.io, Io::kInput);
    EXPECT_EQ(r.slot, 1u);
    EXPECT_EQ(r.dtype, "float32");
    EXPECT_EQ(r.shape, shape);
    EXPECT_EQ(r.max, 6.0);
    EXPECT_EQ(r.min, -1.5);
    EXPECT_EQ(r.avg, 2.25);
    EXPECT_EQ(r.l2norm, 9.53939);
  }
}

TEST(StatisticCsvTest, ReaderCountsRowsThatNameNoTensorAndRefusesAHeaderWithoutOne) {
  auto read = parseStatisticCsv(
      "Op Type,Op Name,Timestamp,IO,Slot,Max Value\n"
      "Add,a,1,output,0,+2.5\n"
      "Add,,2,output,0,1\n"
      "Add,b,x,output,0,1\n",
      "s.csv");
  ASSERT_TRUE(read);
  ASSERT_EQ(read->rows.size(), 1u);
  EXPECT_EQ(read->rows[0].max, 2.5);
  EXPECT_FALSE(read->rows[0].min);  // no such column
  EXPECT_FALSE(read->rows[0].shape);
  EXPECT_EQ(read->bad_rows, 2u);
  EXPECT_EQ(read->first_bad_line, 3u);
  auto bad = parseStatisticCsv("Op Type,Op Name,IO,Slot\n", "s.csv");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "s.csv: the header has no 'Timestamp' column");
  auto empty = parseStatisticCsv("", "s.csv");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->rows.empty());
}

}  // namespace
}  // namespace dumpd::storage
