// file_format "bin" through JobWriter (one Ascend bin file per op execution) and the bin file
// codec of storage/format/bin_file.h. The Python side (tests/python/test_bin.py) reads the
// daemon's files with an independent reader.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "proto/ascend_dump.pb.h"
#include "storage/format/bin_file.h"
#include "storage/fs/memory_file_system.h"
#include "storage/writer/job_writer.h"
#include "tests/storage/storage_test_util.h"
#include "tests/storage/writer_fixture.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::makePlan;
using testing::makeTensor;
using testing::OwnedOp;

constexpr uint64_t kTs = 1700000000000000;
constexpr const char* kDir = "rank_0/Net/0/0";

config::DumpPlan binPlan(config::SavedData saved = config::SavedData::kTensor) {
  config::DumpPlan plan = makePlan(saved);
  plan.file_format = config::FileFormat::kBin;
  return plan;
}

OwnedOp addOp() {
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kInput, 0, {2, 3}, {1, 2, 3, 4, 5, 6}, kTs));
  op.tensors.push_back(floatTensor(Io::kInput, 1, {2, 3}, {7, 8, 9, 10, 11, 12}, kTs + 1));
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 3}, {8, 10, 12, 14, 16, 18}, kTs + 2));
  return op;
}

std::span<const std::byte> bytesOf(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

class BinWriterTest : public testing::WriterFixture {
 protected:
  // The tensor's bytes in a parsed file.
  static std::string payload(const std::string& file, const BinTensor& t) {
    return file.substr(t.offset, t.size);
  }
};

TEST_F(BinWriterTest, OneFilePerOpWithEveryTensorInFileOrder) {
  auto w = make(binPlan());
  OwnedOp op = addOp();
  // Listed output first and inputs out of slot order: the file still holds the inputs' bytes
  // first, by slot.
  std::swap(op.tensors[0], op.tensors[2]);
  std::swap(op.tensors[1], op.tensors[2]);
  auto r = w->writeOp(op.record());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r.value().tensors_written, 3u);
  // The timestamp is the first listed tensor's (here the output's, kTs + 2).
  const std::string name = "Add.Default_Add-op0.0.0." + std::to_string(kTs + 2);
  ASSERT_EQ(filesIn(kDir), std::vector<std::string>{name});
  const std::string file = read(std::string(kDir) + "/" + name);
  EXPECT_EQ(r.value().bytes_written, file.size());
  auto parsed = parseBinFile(bytesOf(file), name);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  const BinFile& b = parsed.value();
  EXPECT_EQ(b.version, "2.0");
  EXPECT_EQ(b.op_name, "Default/Add-op0");  // unsanitised
  EXPECT_EQ(b.dump_time, kTs + 2);
  ASSERT_EQ(b.tensors.size(), 3u);
  const std::vector<float> in0 = {1, 2, 3, 4, 5, 6}, in1 = {7, 8, 9, 10, 11, 12},
                           out0 = {8, 10, 12, 14, 16, 18};
  const std::vector<std::pair<Io, const std::vector<float>*>> want = {
      {Io::kInput, &in0}, {Io::kInput, &in1}, {Io::kOutput, &out0}};
  uint64_t expected_offset = file.size() - 3 * 24;
  for (size_t i = 0; i < 3; ++i) {
    const BinTensor& t = b.tensors[i];
    EXPECT_EQ(t.io, want[i].first) << i;
    EXPECT_EQ(t.data_type, 1) << i;  // DT_FLOAT
    EXPECT_EQ(t.dtype, DType::kFloat32);
    EXPECT_EQ(t.format, 2) << i;  // DefaultFormat -> ND
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t.offset, expected_offset) << i;
    expected_offset += 24;
    EXPECT_EQ(payload(file, t),
              std::string(reinterpret_cast<const char*>(want[i].second->data()), 24))
        << i;
  }
  EXPECT_EQ(b.tensors[1].index, 1u);
  EXPECT_EQ(b.tensors[2].index, 0u);
}

TEST_F(BinWriterTest, EmptyTensorsKeepTheirPlaceSoIndexesAreSlots) {
  auto w = make(binPlan(config::SavedData::kFull));
  OwnedOp op = addOp();
  op.tensors[0] = floatTensor(Io::kInput, 0, {0, 3}, {}, kTs);
  ASSERT_TRUE(w->writeOp(op.record()).has_value());
  ASSERT_TRUE(w->finish().has_value());
  const std::string name = "Add.Default_Add-op0.0.0." + std::to_string(kTs);
  const std::string file = read(std::string(kDir) + "/" + name);
  auto parsed = parseBinFile(bytesOf(file), name);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  ASSERT_EQ(parsed.value().tensors.size(), 3u);
  EXPECT_EQ(parsed.value().tensors[0].shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(parsed.value().tensors[0].size, 0u);
  EXPECT_EQ(parsed.value().tensors[1].size, 24u);
  // As for npy, an empty tensor has no statistics row.
  const std::string csv = read(std::string(kDir) + "/statistic.csv");
  EXPECT_EQ(csv.find(",input,0,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",input,1,"), std::string::npos) << csv;
}

TEST_F(BinWriterTest, FullWritesStatisticRowsWithTheFileTimestamp) {
  auto w = make(binPlan(config::SavedData::kFull));
  OwnedOp op = addOp();
  ASSERT_TRUE(w->writeOp(op.record()).has_value());
  ASSERT_TRUE(w->finish().has_value());
  const std::string ts = std::to_string(kTs);
  EXPECT_EQ(filesIn(kDir),
            (std::vector<std::string>{"Add.Default_Add-op0.0.0." + ts, "statistic.csv"}));
  const std::string csv = read(std::string(kDir) + "/statistic.csv");
  EXPECT_NE(csv.find("Add,Default/Add-op0,0,0," + ts + ",input,0,24,float32,\"[2,3]\",6,1,"),
            std::string::npos)
      << csv;
  EXPECT_NE(csv.find("Add,Default/Add-op0,0,0," + ts + ",output,0,24,float32,\"[2,3]\",18,8,"),
            std::string::npos)
      << csv;
}

TEST_F(BinWriterTest, StatisticOnlyWritesNoBinFile) {
  auto w = make(binPlan(config::SavedData::kStatistic));
  OwnedOp op = addOp();
  auto r = w->writeOp(op.record());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r.value().tensors_written, 3u);  // rows count as written
  ASSERT_TRUE(w->finish().has_value());
  EXPECT_EQ(filesIn(kDir), std::vector<std::string>{"statistic.csv"});
}

TEST_F(BinWriterTest, InputOutputSelectionAndSampling) {
  config::DumpPlan plan = binPlan();
  plan.input_output = config::IoSelect::kInputs;
  plan.sample_mode = true;
  plan.sample_num = 4;
  auto w = make(plan);
  OwnedOp op = addOp();
  ASSERT_TRUE(w->writeOp(op.record()).has_value());
  auto files = filesIn(kDir);
  ASSERT_EQ(files.size(), 1u);
  const std::string file = read(std::string(kDir) + "/" + files[0]);
  auto parsed = parseBinFile(bytesOf(file), files[0]);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  ASSERT_EQ(parsed.value().tensors.size(), 2u);
  for (const BinTensor& t : parsed.value().tensors) {
    EXPECT_EQ(t.io, Io::kInput);
    EXPECT_EQ(t.shape, std::vector<int64_t>{4});
    EXPECT_EQ(t.size, 16u);
  }
  const std::vector<float> first4 = {7, 8, 9, 10};
  EXPECT_EQ(payload(file, parsed.value().tensors[1]),
            std::string(reinterpret_cast<const char*>(first4.data()), 16));
}

TEST_F(BinWriterTest, RawBytesOfEveryDtypeAndFormatsByName) {
  config::DumpPlan plan = binPlan();
  plan.trans_flag = false;
  auto w = make(plan);
  OwnedOp op;
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc000, 0x7fc0};  // 1, -2, nan
  const std::vector<uint8_t> int4 = {0x7f, 0x08};               // -1, 7, -8 (3 elements)
  op.tensors.push_back(makeTensor(Io::kInput, 0, DType::kBFloat16, {3}, bf16));
  op.tensors.push_back(makeTensor(Io::kInput, 1, DType::kInt4, {3}, int4));
  op.tensors.push_back(makeTensor(Io::kOutput, 0, DType::kFloat16, {1}, std::vector<uint16_t>{0}));
  op.tensors[0].format = "NCHW";
  op.tensors[1].format = "FRACTAL_NZ";
  op.tensors[2].format = "SomethingElse";
  ASSERT_TRUE(w->writeOp(op.record()).has_value());
  auto files = filesIn(kDir);
  ASSERT_EQ(files.size(), 1u);
  const std::string file = read(std::string(kDir) + "/" + files[0]);
  auto parsed = parseBinFile(bytesOf(file), files[0]);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  const auto& t = parsed.value().tensors;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].data_type, 27);  // DT_BF16, not converted
  EXPECT_EQ(t[0].size, 6u);
  EXPECT_EQ(payload(file, t[0]), std::string(reinterpret_cast<const char*>(bf16.data()), 6));
  EXPECT_EQ(t[1].data_type, 28);  // DT_INT4, packed as the producer sent it
  EXPECT_EQ(t[1].size, 2u);
  EXPECT_EQ(payload(file, t[1]), std::string("\x7f\x08", 2));
  EXPECT_EQ(t[2].data_type, 2);  // DT_FLOAT16
  EXPECT_EQ(t[0].format, 0);     // NCHW
  EXPECT_EQ(t[1].format, 29);    // FRACTAL_NZ
  EXPECT_EQ(t[2].format, 2);     // unknown -> ND
}

TEST_F(BinWriterTest, QuotaDropsTheWholeFileAndKeepsRows) {
  JobOptions options;
  options.quota_bytes = 100;  // less than one file
  auto w = make(binPlan(config::SavedData::kFull), options);
  OwnedOp op = addOp();
  auto r = w->writeOp(op.record());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r.value().tensors_dropped, 3u);
  EXPECT_EQ(r.value().tensors_written, 0u);
  ASSERT_TRUE(w->finish().has_value());
  EXPECT_EQ(filesIn(kDir), std::vector<std::string>{"statistic.csv"});
  EXPECT_EQ(w->counters().tensors_dropped, 3u);
}

TEST_F(BinWriterTest, ARepeatedTensorIsRefusedNamingWhy) {
  auto w = make(binPlan());
  OwnedOp op = addOp();
  TensorMemo memo(0, 0, DType::kFloat32, {2, 3});
  memo.publish(MemoResult{true, "", kDir, "x", false, std::nullopt});
  OpRecord rec = op.record();
  op.views[1].data = {};
  op.views[1].same_as = &memo;
  auto r = w->writeOp(rec);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("repeats an earlier tensor"), std::string::npos)
      << r.error().message;
  EXPECT_TRUE(filesIn(kDir).empty());
}

// ---- the codec

std::string goodFile() {
  std::string header;
  const int64_t shape[] = {2};
  BinTensorSpec specs[] = {{Io::kInput, DType::kInt32, shape, "ND", 8},
                           {Io::kOutput, DType::kInt32, shape, "ND", 8}};
  buildBinHeader(header, "Default/Op-op1", 5, specs);
  return header + std::string(16, '\x01');
}

TEST(BinFileTest, ParsesWhatItBuilds) {
  const std::string f = goodFile();
  auto parsed = parseBinFile(bytesOf(f), "f");
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(parsed.value().op_name, "Default/Op-op1");
  EXPECT_EQ(parsed.value().dump_time, 5u);
  ASSERT_EQ(parsed.value().tensors.size(), 2u);
  EXPECT_EQ(parsed.value().tensors[1].offset, f.size() - 8);
}

// buildBinHeader appends op_name by hand; the bytes must be what protobuf itself writes, for
// a name whose length takes one varint byte, two, and none at all.
TEST(BinFileTest, HeaderIsProtobufsOwnSerialisation) {
  const int64_t shape[] = {3, 1, 2};
  const BinTensorSpec specs[] = {{Io::kInput, DType::kFloat16, shape, "NCHW", 12},
                                 {Io::kOutput, DType::kInt4, shape, "ND", 3}};
  for (const std::string& name :
       {std::string("Default/Add-op1"), std::string(300, 'n'), std::string()}) {
    std::string header;
    buildBinHeader(header, name, 1700000000000123, specs);
    toolkit::dumpdata::DumpData expected;
    expected.set_version("2.0");
    expected.set_dump_time(1700000000000123);
    expected.set_op_name(name);
    auto* in = expected.add_input();
    in->set_data_type(toolkit::dumpdata::DT_FLOAT16);
    in->set_format(toolkit::dumpdata::FORMAT_NCHW);
    for (int64_t d : shape) in->mutable_shape()->add_dim(static_cast<uint64_t>(d));
    *in->mutable_original_shape() = in->shape();
    in->set_size(12);
    auto* out = expected.add_output();
    out->set_data_type(toolkit::dumpdata::DT_INT4);
    out->set_format(toolkit::dumpdata::FORMAT_ND);
    *out->mutable_shape() = in->shape();
    *out->mutable_original_shape() = in->shape();
    out->set_size(3);
    const std::string body = expected.SerializeAsString();
    ASSERT_EQ(header.size(), 8 + body.size()) << name.size();
    uint64_t len = 0;
    std::memcpy(&len, header.data(), 8);
    EXPECT_EQ(len, body.size());
    EXPECT_EQ(header.substr(8), body) << name.size();
  }
}

TEST(BinFileTest, RejectsSizesThatDoNotAddUpNamingTheFile) {
  const std::string f = goodFile();
  auto expectBad = [](const std::string& bytes, const std::string& what) {
    auto parsed = parseBinFile(bytesOf(bytes), "dir/Op.x.0.0.1");
    ASSERT_FALSE(parsed.has_value()) << what;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(parsed.error().message.rfind("dir/Op.x.0.0.1: ", 0), 0u) << parsed.error().message;
  };
  expectBad(f.substr(0, f.size() - 1), "truncated");
  expectBad(f + "x", "one byte too many");
  expectBad(f.substr(0, 5), "shorter than the length");
  std::string huge = f;
  const uint64_t len = f.size();  // past the end
  std::memcpy(huge.data(), &len, 8);
  expectBad(huge, "header length past the end");
  std::string garbage = f;
  for (size_t i = 8; i < 20; ++i) garbage[i] = '\xff';
  expectBad(garbage, "header does not parse");
}

TEST(BinFileTest, FileNames) {
  std::string name;
  appendBinFileName(name, "Conv2D", "Default/net.conv 1/Conv2D-op3", 2, 7, 161243956333802);
  EXPECT_EQ(name, "Conv2D.Default_net_conv_1_Conv2D-op3.2.7.161243956333802");
  auto parsed = parseBinFileName(name);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->op_type, "Conv2D");
  EXPECT_EQ(parsed->op_name, "Default_net_conv_1_Conv2D-op3");
  EXPECT_EQ(parsed->task_id, 2u);
  EXPECT_EQ(parsed->stream_id, 7u);
  EXPECT_EQ(parsed->timestamp, 161243956333802u);
  EXPECT_FALSE(parseBinFileName("a.b.1.2"));
  EXPECT_FALSE(parseBinFileName("a.b.1.2.3.npy"));
  EXPECT_FALSE(parseBinFileName("a.b.x.2.3"));
  EXPECT_FALSE(parseBinFileName("a.b.1.2.99999999999999999999999"));
  EXPECT_FALSE(parseBinFileName("a.b.4294967296.2.3"));
  EXPECT_FALSE(parseBinFileName(".b.1.2.3"));
}

TEST(BinFileTest, DataTypesAndFormats) {
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto t = static_cast<DType>(i);
    EXPECT_EQ(dtypeFromBinDataType(binDataType(t)), t) << dtypeName(t);
  }
  EXPECT_EQ(binDataType(DType::kFloat32), 1);
  EXPECT_EQ(binDataType(DType::kBFloat16), 27);
  EXPECT_FALSE(dtypeFromBinDataType(13));  // DT_STRING
  EXPECT_EQ(binDataTypeName(13), "DT_STRING");
  EXPECT_EQ(binDataTypeName(99), "DT_99");
  EXPECT_EQ(binFormat("DefaultFormat"), 2);
  EXPECT_EQ(binFormat("NC1HWC0"), 3);
  EXPECT_EQ(binFormat("FRACTAL_Z_G"), 39);
  EXPECT_EQ(binFormatName(29), "FRACTAL_NZ");
  EXPECT_EQ(binFormatName(255), "MAX");
  EXPECT_EQ(binFormatName(77), "FORMAT_77");
}

}  // namespace
}  // namespace dumpd::storage
