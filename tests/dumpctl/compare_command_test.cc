#include "dumpctl/compare_command.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "storage/format/bin_file.h"
#include "storage/format/npy.h"
#include "tests/tools/tools_test_util.h"
#include "tools/compare_csv.h"
#include "tools/compare_metrics.h"
#include "tools/progress.h"

namespace dumpd::tools {
namespace {

using dumpctl::runCompareCommand;

namespace fs = std::filesystem;
using testing::TempDir;
using testing::writeFile;

template <typename T>
std::string npyOf(DType dtype, const std::vector<T>& v, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  std::string out;
  storage::buildNpyHeader(out, dtype, shape);
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  return out;
}

std::string tensorName(const std::string& op, uint64_t ts, const char* io = "output", int slot = 0,
                       const char* dtype = "float32") {
  return "Add." + op + ".0.0." + std::to_string(ts) + "." + io + "." + std::to_string(slot) +
         ".DefaultFormat." + dtype + ".npy";
}

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& e : v) e = d(g);
  return v;
}

struct Outcome {
  int code = 0;
  std::string out, err;
  std::vector<CsvRecord> csv;  // without the header
};

Outcome compare(std::vector<std::string> args, const std::string& csv_path = "") {
  std::vector<std::string_view> views(args.begin(), args.end());
  if (!csv_path.empty()) {
    views.push_back("-o");
    views.push_back(csv_path);
  }
  std::ostringstream out, err;
  Outcome r;
  r.code = runCompareCommand(views, out, err);
  r.out = out.str();
  r.err = err.str();
  if (!csv_path.empty() && fs::exists(csv_path)) {
    std::ifstream in(csv_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto records = parseCsv(text, csv_path);
    EXPECT_TRUE(records);
    r.csv.assign(records->begin() + 1, records->end());
    EXPECT_EQ((*records)[0].fields.size(), 15u);
  }
  return r;
}

const std::string kIter = "rank_0/Net/0/0/";

// Column indices of the result CSV.
enum Col {
  kLeft,
  kRight,
  kIndex,
  kCosine,
  kMaxAbs,
  kAccRel,
  kRed,
  kKl,
  kStd,
  kMae,
  kRmse,
  kDType,
  kShape,
  kResult,
  kNote
};

TEST(CompareCommand, IdenticalTreesPassWithCosineOneAndExitZero) {
  TempDir d;
  for (const char* side : {"L/", "R/"}) {
    writeFile(d / (side + kIter + tensorName("Default_Add-op0", 1)),
              npyOf(DType::kFloat32, normal(100, 1)));
    writeFile(d / (side + kIter + tensorName("Default_Add-op0", 1, "input")),
              npyOf(DType::kFloat32, normal(7, 2)));
  }
  Outcome r = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("all 2 pairs pass"), std::string::npos) << r.out;
  ASSERT_EQ(r.csv.size(), 2u);
  EXPECT_EQ(r.csv[0].fields[kIndex], "input.0");  // input before output
  EXPECT_EQ(r.csv[1].fields[kIndex], "output.0");
  for (const CsvRecord& row : r.csv) {
    EXPECT_EQ(row.fields[kCosine], "1");
    EXPECT_EQ(row.fields[kMaxAbs], "0");
    EXPECT_EQ(row.fields[kResult], "pass");
  }
  EXPECT_EQ(r.csv[1].fields[kShape], "[100]");
}

TEST(CompareCommand, FirstDivergenceIsTheFirstFailingOpInExecutionOrder) {
  TempDir d;
  for (int i = 0; i < 5; ++i) {
    auto x = normal(64, static_cast<uint32_t>(i));
    auto y = x;
    if (i >= 2) {  // op2 and every later op diverge
      for (float& v : y) v = -v;
    }
    const std::string op = "Default_Op-op" + std::to_string(i);
    writeFile(d / ("L/" + kIter + tensorName(op, 10 + static_cast<uint64_t>(i))),
              npyOf(DType::kFloat32, x));
    writeFile(d / ("R/" + kIter + tensorName(op, 90 - static_cast<uint64_t>(i))),
              npyOf(DType::kFloat32, y));
  }
  Outcome r = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("first divergence: rank 0 graph 0 iteration 0 op Default_Op-op2 "
                       "output.0: cosine -1 < 0.99"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("failed 3"), std::string::npos);
  ASSERT_EQ(r.csv.size(), 5u);
  EXPECT_EQ(r.csv[0].fields[kResult], "pass");
  EXPECT_EQ(r.csv[1].fields[kResult], "pass");
  EXPECT_EQ(r.csv[2].fields[kResult], "fail");
  EXPECT_NE(r.csv[2].fields[kNote].find("relative euclidean 2 > 0.05"), std::string::npos);
}

TEST(CompareCommand, RepeatedOpsMatchByOccurrenceOrder) {
  TempDir d;
  auto a = normal(32, 1), b = normal(32, 2);
  writeFile(d / ("L/" + kIter + tensorName("loop", 5)), npyOf(DType::kFloat32, a));
  writeFile(d / ("L/" + kIter + tensorName("loop", 6)), npyOf(DType::kFloat32, b));
  writeFile(d / ("R/" + kIter + tensorName("loop", 105)), npyOf(DType::kFloat32, a));
  writeFile(d / ("R/" + kIter + tensorName("loop", 106)), npyOf(DType::kFloat32, b));
  Outcome r = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(r.csv.size(), 2u);
  EXPECT_EQ(r.csv[0].fields[kCosine], "1");
  EXPECT_EQ(r.csv[1].fields[kCosine], "1");
}

TEST(CompareCommand, UnmatchedTensorsAreStarRowsAndDoNotFail) {
  TempDir d;
  auto x = normal(16, 3);
  writeFile(d / ("L/" + kIter + tensorName("both", 1)), npyOf(DType::kFloat32, x));
  writeFile(d / ("R/" + kIter + tensorName("both", 1)), npyOf(DType::kFloat32, x));
  writeFile(d / ("L/" + kIter + tensorName("left_only", 2)), npyOf(DType::kFloat32, x));
  writeFile(d / ("R/" + kIter + tensorName("right_only", 0)), npyOf(DType::kFloat32, x));
  Outcome r = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("left only 1, right only 1"), std::string::npos) << r.out;
  ASSERT_EQ(r.csv.size(), 3u);
  EXPECT_EQ(r.csv[1].fields[kLeft], "left_only");
  EXPECT_EQ(r.csv[1].fields[kRight], "*");
  EXPECT_EQ(r.csv[1].fields[kCosine], "NaN");
  EXPECT_EQ(r.csv[1].fields[kResult], "unmatched");
  EXPECT_EQ(r.csv[2].fields[kLeft], "*");  // right-only rows come last
  EXPECT_EQ(r.csv[2].fields[kRight], "right_only");
}

TEST(CompareCommand, MapFileRenamesLeftOpsAndMalformedLinesAreUsageErrors) {
  TempDir d;
  auto x = normal(16, 4);
  writeFile(d / ("L/" + kIter + tensorName("Default_MatMul-op3", 1)), npyOf(DType::kFloat32, x));
  writeFile(d / ("R/" + kIter + tensorName("Default_Dense-op9", 1)), npyOf(DType::kFloat32, x));
  writeFile(d / "map.csv", "left,right\nDefault/MatMul-op3,Default/Dense-op9\n");
  Outcome r = compare({d / "L", d / "R", "-q", "--map", d / "map.csv"}, d / "out.csv");
  EXPECT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.csv.size(), 1u);
  EXPECT_EQ(r.csv[0].fields[kLeft], "Default_MatMul-op3");
  EXPECT_EQ(r.csv[0].fields[kRight], "Default_Dense-op9");
  writeFile(d / "bad.csv", "a,b\nc\n");
  Outcome bad = compare({d / "L", d / "R", "--map", d / "bad.csv"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("line 2"), std::string::npos) << bad.err;
  Outcome missing = compare({d / "L", d / "R", "--map", d / "none.csv"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("none.csv"), std::string::npos);
}

TEST(CompareCommand, UsageErrorsExitTwo) {
  for (std::vector<std::string> args : {std::vector<std::string>{"only_one"},
                                        {"a", "b", "--bogus"},
                                        {"a", "b", "-o"},
                                        {"a", "b", "-j", "0"},
                                        {"a", "b", "--min-cosine", "high"},
                                        {"a", "b", "--max-kl", "inf"},
                                        {"a", "b", "--max-relative-euclidean", "nan"},
                                        {"a", "b", "c"}}) {
    Outcome r = compare(args);
    EXPECT_EQ(r.code, 2) << args.back();
    EXPECT_NE(r.err.find("usage:"), std::string::npos);
  }
  Outcome help = compare({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--max-kl"), std::string::npos);
}

TEST(CompareCommand, NothingToCompareExitsThree) {
  TempDir d;
  writeFile(d / ("L/" + kIter + tensorName("a", 1)), npyOf(DType::kFloat32, normal(4, 1)));
  writeFile(d / ("R/" + kIter + tensorName("b", 1)), npyOf(DType::kFloat32, normal(4, 1)));
  fs::create_directories(d / "empty");
  EXPECT_EQ(compare({d / "L", d / "missing"}).code, 3);
  Outcome empty = compare({d / "L", d / "empty"});
  EXPECT_EQ(empty.code, 3);
  EXPECT_NE(empty.err.find("no tensors found"), std::string::npos);
  Outcome unmatched = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(unmatched.code, 3);
  EXPECT_EQ(unmatched.csv.size(), 2u);  // the CSV still says what was there
}

TEST(CompareCommand, ElementCountsMustMatchButShapesMayDiffer) {
  TempDir d;
  auto x = normal(6, 5);
  writeFile(d / ("L/" + kIter + tensorName("count", 1)), npyOf(DType::kFloat32, x, {2, 3}));
  writeFile(d / ("R/" + kIter + tensorName("count", 1)), npyOf(DType::kFloat32, normal(7, 5)));
  writeFile(d / ("L/" + kIter + tensorName("reshaped", 2)), npyOf(DType::kFloat32, x, {2, 3}));
  writeFile(d / ("R/" + kIter + tensorName("reshaped", 2)), npyOf(DType::kFloat32, x, {6}));
  Outcome r = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(r.code, 1);
  ASSERT_EQ(r.csv.size(), 2u);
  EXPECT_EQ(r.csv[0].fields[kResult], "fail");
  EXPECT_EQ(r.csv[0].fields[kNote], "left [2,3] (6 elements), right [7] (7)");
  EXPECT_EQ(r.csv[1].fields[kResult], "pass");
  EXPECT_EQ(r.csv[1].fields[kCosine], "1");
  EXPECT_EQ(r.csv[1].fields[kNote], "shapes differ: left [2,3], right [6]");
}

TEST(CompareCommand, LargePairIsSplitAcrossThreadsWithTheSameResult) {
  TempDir d;
  const size_t n = (size_t{1} << 21) + 12345;  // three chunks
  auto x = normal(n, 6), y = normal(n, 7);
  for (size_t i = 0; i < n; ++i) y[i] = x[i] + 0.01f * y[i];
  writeFile(d / ("L/" + kIter + tensorName("big", 1)), npyOf(DType::kFloat32, x));
  writeFile(d / ("R/" + kIter + tensorName("big", 1)), npyOf(DType::kFloat32, y));
  Outcome one = compare({d / "L", d / "R", "-q", "-j", "1"}, d / "one.csv");
  Outcome four = compare({d / "L", d / "R", "-q", "-j", "4"}, d / "four.csv");
  ASSERT_EQ(one.csv.size(), 1u);
  ASSERT_EQ(four.csv.size(), 1u);
  EXPECT_EQ(one.csv[0].fields, four.csv[0].fields);
  PairMetrics direct =
      comparePair(TensorData::view(DType::kFloat32, std::as_bytes(std::span(x)), n),
                  TensorData::view(DType::kFloat32, std::as_bytes(std::span(y)), n));
  const auto& f = four.csv[0].fields;
  EXPECT_NEAR(std::stod(f[kCosine]), direct.cosine, 1e-12);
  EXPECT_NEAR(std::stod(f[kRed]), direct.relative_euclidean, 1e-12 * direct.relative_euclidean);
  EXPECT_NEAR(std::stod(f[kKl]), direct.kl_divergence, 1e-9 * direct.kl_divergence);
  EXPECT_NEAR(std::stod(f[kMae]), direct.mean_absolute_error, 1e-12 * direct.mean_absolute_error);
  EXPECT_EQ(std::stod(f[kMaxAbs]), direct.max_absolute_error);
  EXPECT_NE(four.out.find("compared 1 pairs"), std::string::npos);
}

std::string binFile(const std::string& op, const std::vector<storage::BinTensorSpec>& specs,
                    const std::string& data) {
  std::string out;
  storage::buildBinHeader(out, op, 1, specs);
  return out + data;
}

TEST(CompareCommand, BinFilesMatchNpyFilesOfTheSameData) {
  TempDir d;
  // bfloat16 in the bin file, float32 in the npy (dumpd's conversion); int4 packed against
  // int8 per element.
  const std::vector<uint16_t> bf16 = {0x3fc0, 0xc000, 0x4049};
  std::vector<float> as_float;
  for (uint16_t b : bf16) {
    uint32_t bits = uint32_t{b} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    as_float.push_back(f);
  }
  const std::vector<int8_t> int4 = {-1, 7, -8};
  const std::string packed = {static_cast<char>(0x7f), static_cast<char>(0x08)};
  const int64_t three[] = {3};
  std::string data(reinterpret_cast<const char*>(bf16.data()), 6);
  data += packed;
  writeFile(d / ("R/" + kIter + "Mul.Default_Mul-op1.0.0.77"),
            binFile("Default/Mul-op1",
                    {{Io::kInput, DType::kBFloat16, three, "ND", 6},
                     {Io::kOutput, DType::kInt4, three, "ND", 2}},
                    data));
  writeFile(d / ("L/" + kIter + "Mul.Default_Mul-op1.0.0.5.input.0.DefaultFormat.bfloat16.npy"),
            npyOf(DType::kFloat32, as_float));
  writeFile(d / ("L/" + kIter + "Mul.Default_Mul-op1.0.0.5.output.0.DefaultFormat.int4.npy"),
            npyOf(DType::kInt8, int4));
  Outcome r = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  ASSERT_EQ(r.csv.size(), 2u);
  for (const CsvRecord& row : r.csv) {
    EXPECT_EQ(row.fields[kCosine], "1") << row.fields[kNote];
    EXPECT_EQ(row.fields[kMaxAbs], "0");
  }
}

TEST(CompareCommand, StatisticsOnlyPairsCompareTheirValues) {
  TempDir d;
  const std::string header =
      "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,"
      "Min Value,Avg Value,L2Norm Value\n";
  writeFile(d / ("L/" + kIter + "statistic.csv"),
            header + "Add,Default/Add-op0,0,0,1,output,0,24,float32,\"[2,3]\",6,1,3.5,9.53939,\n" +
                "Add,Default/Sub-op1,0,0,2,output,0,24,float32,\"[2,3]\",6,1,3.5,9.53939,\n");
  writeFile(d / ("R/" + kIter + "statistic.csv"),
            header + "Add,Default_Add-op0,0,0,7,output,0,24,float32,\"(2,3)\",6,1,3.5,9.53939,\n" +
                "Add,Default_Sub-op1,0,0,8,output,0,24,float32,\"(2,3)\",6,1,4.5,9.53939,\n");
  Outcome r = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(r.code, 1);
  ASSERT_EQ(r.csv.size(), 2u);
  EXPECT_EQ(r.csv[0].fields[kResult], "pass");
  EXPECT_EQ(r.csv[0].fields[kShape], "[2,3]");
  EXPECT_EQ(r.csv[0].fields[kCosine], "NaN");
  EXPECT_NE(r.csv[0].fields[kNote].find("Max Value 6 vs 6"), std::string::npos);
  EXPECT_EQ(r.csv[1].fields[kResult], "fail");
  EXPECT_NE(r.csv[1].fields[kNote].find("Avg Value relative difference 0.222222 > 0.05"),
            std::string::npos)
      << r.csv[1].fields[kNote];
  Outcome loose = compare({d / "L", d / "R", "-q", "--max-statistic-relative", "0.3"});
  EXPECT_EQ(loose.code, 0) << loose.out;
}

TEST(CompareCommand, StatisticsOnlyAgainstATensorComputesTheTensorsStatistics) {
  TempDir d;
  writeFile(d / ("L/" + kIter + "statistic.csv"),
            "Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,"
            "Max Value,Min Value,L2Norm Value\n"
            "Add,Default/Add-op0,0,0,1,output,0,12,float32,\"[3]\",4,-2,4.58258,\n");
  writeFile(d / ("R/" + kIter + tensorName("Default_Add-op0", 1)),
            npyOf(DType::kFloat32, std::vector<float>{1, -2, 4}));
  Outcome r = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(r.csv.size(), 1u);
  EXPECT_NE(r.csv[0].fields[kNote].find("Min Value -2 vs -2"), std::string::npos)
      << r.csv[0].fields[kNote];
  EXPECT_NE(r.csv[0].fields[kNote].find("Avg Value NaN vs 1"), std::string::npos);
}

TEST(CompareCommand, AnUnreadableTensorIsAnErrorRowAndExitsOne) {
  TempDir d;
  writeFile(d / ("L/" + kIter + tensorName("a", 1)), "broken");
  writeFile(d / ("R/" + kIter + tensorName("a", 1)), npyOf(DType::kFloat32, normal(4, 1)));
  Outcome r = compare({d / "L", d / "R", "-q"}, d / "out.csv");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("errors 1"), std::string::npos);
  ASSERT_EQ(r.csv.size(), 1u);
  EXPECT_EQ(r.csv[0].fields[kResult], "error");
  EXPECT_NE(r.csv[0].fields[kNote].find("left: "), std::string::npos);
}

TEST(CompareCsv, ParsesQuotedFieldsAndNamesTheLineOfAnOpenQuote) {
  auto ok = parseCsv("a,\"b,\"\"c\"\"\",\r\n\n\"multi\nline\",x\n", "t.csv");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].fields, (std::vector<std::string>{"a", "b,\"c\"", ""}));
  EXPECT_EQ((*ok)[1].line, 3u);
  EXPECT_EQ((*ok)[1].fields[0], "multi\nline");
  auto bad = parseCsv("a\n\"open,\n", "t.csv");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("t.csv line 2"), std::string::npos);
  std::string field;
  appendCsvField(field, "x,\"y\"");
  EXPECT_EQ(field, "\"x,\"\"y\"\"\"");
}

// Found by dump_file_fuzz: a lone CR after a closing quote ended the record and swallowed the
// next character as if it were the LF.
TEST(CompareCsv, ALoneCarriageReturnAfterAQuoteIsAnErrorNotALineEnd) {
  auto lone = parseCsv("\"a\"\r-\nb\n", "f");
  ASSERT_FALSE(lone.has_value());
  EXPECT_NE(lone.error().message.find("f line 1: text after the closing quote"), std::string::npos)
      << lone.error().message;
  auto crlf = parseCsv("\"a\"\r\nb\n", "f");
  ASSERT_TRUE(crlf.has_value());
  ASSERT_EQ(crlf->size(), 2u);
  EXPECT_EQ((*crlf)[1].line, 2u);
  EXPECT_EQ((*crlf)[1].fields[0], "b");
}

TEST(CompareCsv, NumbersRoundTripAndNaNIsSpelledOut) {
  std::string s;
  for (double v : {0.1, 1.0 / 3, -2.5e-300, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    appendNumber(s, v);
    s.push_back(' ');
  }
  EXPECT_EQ(s, "0.1 0.3333333333333333 -2.5e-300 inf NaN ");
}

TEST(CompareCsv, AtomicWriteReplacesTheFileAndLeavesNoTemporary) {
  TempDir d;
  writeFile(d / "r.csv", "old");
  ASSERT_TRUE(writeFileAtomically(d / "r.csv", "new content"));
  std::ifstream in(d / "r.csv");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "new content");
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(d / "r.csv").parent_path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);
  EXPECT_FALSE(writeFileAtomically(d / "no/such/dir/r.csv", "x"));
}

// In a shared directory (/tmp) another user may plant a link where the temporary file would
// go; the temporary name is fresh and created exclusively, so no link is followed.
TEST(CompareCsv, AtomicWriteFollowsNoPlantedLink) {
  TempDir d;
  writeFile(d / "victim", "precious");
  fs::create_symlink(d / "victim", d / ("r.csv.tmp." + std::to_string(::getpid())));
  ASSERT_TRUE(writeFileAtomically(d / "r.csv", "report"));
  std::ifstream in(d / "victim");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious");
  EXPECT_EQ(fs::file_size(d / "r.csv"), 6u);
}

TEST(ProgressBar, RendersBarPercentPairsAndRate) {
  EXPECT_EQ(ProgressBar::render(45, 100, 2'400'000'000, 2.0),
            "[#########...........] 45% 45/100 pairs 1.2 GB/s");
  std::ostringstream quiet;
  {
    ProgressBar bar(quiet, false, 10);
    bar.add(3, 100);
  }
  EXPECT_EQ(quiet.str(), "");
}

}  // namespace
}  // namespace dumpd::tools
