// dumpctl convert: bin files built with storage::buildBinHeader (or the proto, for what dumpd
// never writes) in a temp dir, converted through runConvertCommand, the .npy files read back.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dumpctl/convert_command.h"
#include "proto/ascend_dump.pb.h"
#include "storage/format/bin_file.h"
#include "storage/format/npy.h"
#include "storage/fs/memory_file_system.h"
#include "tests/tools/tools_test_util.h"
#include "tools/bin_convert.h"

namespace dumpd::tools {
namespace {

using dumpctl::runConvertCommand;

namespace fs = std::filesystem;
using testing::readFile;
using testing::TempDir;
using testing::writeFile;
namespace pb = toolkit::dumpdata;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kDumpTime = 1700000000123456;

struct TestTensor {
  Io io = Io::kOutput;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A whole bin file: dumpd's header, then the inputs' bytes, then the outputs'.
std::string binFileBytes(const std::vector<TestTensor>& tensors) {
  std::vector<storage::BinTensorSpec> specs;
  for (const TestTensor& t : tensors) {
    specs.push_back(
        {.io = t.io, .dtype = t.dtype, .shape = t.shape, .format = "ND", .size = t.bytes.size()});
  }
  std::string out;
  storage::buildBinHeader(out, "Default/op", kDumpTime, specs);
  for (Io io : {Io::kInput, Io::kOutput}) {
    for (const TestTensor& t : tensors) {
      if (t.io == io) out += t.bytes;
    }
  }
  return out;
}

// The 8-byte length prefix and `data` serialized, then `payload`.
std::string binFileFromProto(const pb::DumpData& data, const std::string& payload) {
  std::string header = data.SerializeAsString();
  uint64_t len = header.size();
  std::string out(reinterpret_cast<const char*>(&len), 8);
  return out + header + payload;
}

// Regular files beneath `root`, root-relative, sorted.
std::vector<std::string> listFiles(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_directory()) out.push_back(e.path().lexically_relative(root).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string randomBytes(size_t n, uint32_t seed, bool zero_one = false) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(zero_one ? rng() & 1 : rng() & 0xff);
  return s;
}

// What dumpd's own .npy writer produces for the tensor.
std::string expectedNpy(DType dtype, const std::vector<int64_t>& shape, const std::string& data) {
  uint64_t elements = 1;
  for (int64_t d : shape) elements *= static_cast<uint64_t>(d);
  std::string header;
  storage::buildNpyHeader(header, dtype, shape);
  storage::MemoryFileSystem memory;
  auto dir = memory.openDirectory("", {});
  auto file = (*dir)->newFile("x.npy", 0644);
  storage::NpyPayload payload{
      .dtype = dtype, .shape = shape, .elements = elements, .data = storage::asBytes(data)};
  EXPECT_TRUE(storage::writeNpy(**file, payload, header, false).has_value());
  EXPECT_TRUE((*file)->commit().has_value());
  return memory.readFile("x.npy").value_or("");
}

// An .npy split into its header dict and its data, read independently of storage/format/npy.h.
struct NpyParts {
  std::string dict;
  std::string data;
};
NpyParts splitNpy(const std::string& file) {
  EXPECT_EQ(file.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  if (file.size() < 10) return {};
  const size_t len = static_cast<unsigned char>(file[8]) | static_cast<unsigned char>(file[9]) << 8;
  return {file.substr(10, len), file.substr(10 + len)};
}

struct Outcome {
  int rc = -1;
  std::string out;
  std::string err;
};
Outcome convert(const std::vector<std::string>& words) {
  std::vector<std::string_view> args(words.begin(), words.end());
  std::ostringstream out, err;
  Outcome r;
  r.rc = runConvertCommand(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

class ConvertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    in_ = tmp_.path() + "/in";
    out_ = tmp_.path() + "/out";
    fs::create_directories(in_);
    old_umask_ = ::umask(022);
  }
  void TearDown() override { ::umask(old_umask_); }

  TempDir tmp_;
  std::string in_;
  std::string out_;
  mode_t old_umask_ = 0;
};

TEST_F(ConvertTest, NamesFollowMsaccucmpIncludingScalars) {
  const std::string bin = "Conv2D.Default_Conv2D-op1.2.7.161243956333802";
  writeFile(in_ + "/" + bin,
            binFileBytes({{Io::kInput, DType::kInt8, {32, 256, 13, 13}, std::string(1384448, 'a')},
                          {Io::kInput, DType::kFloat32, {3}, std::string(12, 'b')},
                          {Io::kOutput, DType::kFloat32, {}, std::string(4, 'c')},
                          {Io::kOutput, DType::kInt16, {0, 3}, ""}}));
  Outcome r = convert({in_, "-o", out_});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_THAT(listFiles(out_),
              ::testing::ElementsAre(bin + ".input.0.32x256x13x13.npy", bin + ".input.1.3.npy",
                                     bin + ".output.0..npy", bin + ".output.1.0x3.npy"));
  EXPECT_EQ(r.out, "converted 4 tensors from 1 files into " + out_ + "\n");
  NpyParts scalar = splitNpy(readFile(out_ + "/" + bin + ".output.0..npy"));
  EXPECT_THAT(scalar.dict, HasSubstr("'shape': ()"));
  EXPECT_EQ(scalar.data, "cccc");
  NpyParts empty = splitNpy(readFile(out_ + "/" + bin + ".output.1.0x3.npy"));
  EXPECT_THAT(empty.dict, HasSubstr("'shape': (0,3,)"));
  EXPECT_EQ(empty.data, "");
}

TEST_F(ConvertTest, EveryDtypeMatchesDumpdNpyWriter) {
  std::vector<TestTensor> tensors;
  const std::vector<int64_t> shape = {3, 5};  // 15 elements: int4 ends on a half byte
  for (int i = 0; i < kDTypeCount; ++i) {
    const auto dtype = static_cast<DType>(i);
    const bool zero_one = dtype == DType::kBool || dtype == DType::kUInt1;
    tensors.push_back({i % 2 ? Io::kOutput : Io::kInput, dtype, shape,
                       randomBytes(sourceBytes(dtype, 15), static_cast<uint32_t>(i), zero_one)});
  }
  const std::string bin = "Mix.op.1.2.3";
  writeFile(in_ + "/" + bin, binFileBytes(tensors));
  Outcome r = convert({in_, "-o", out_});
  ASSERT_EQ(r.rc, 0) << r.err;
  int inputs = 0, outputs = 0;
  for (const TestTensor& t : tensors) {
    const int index = t.io == Io::kInput ? inputs++ : outputs++;
    const std::string name =
        bin + (t.io == Io::kInput ? ".input." : ".output.") + std::to_string(index) + ".3x5.npy";
    SCOPED_TRACE(std::string(dtypeName(t.dtype)) + " " + name);
    const std::string got = readFile(out_ + "/" + name);
    EXPECT_EQ(got, expectedNpy(t.dtype, shape, t.bytes));
    EXPECT_THAT(splitNpy(got).dict,
                HasSubstr("'descr': '" + std::string(npyDescr(storedDType(t.dtype))) + "'"));
  }
  EXPECT_EQ(r.out, "converted 17 tensors from 1 files into " + out_ + "\n");
}

TEST_F(ConvertTest, Bfloat16BecomesExactFloat32) {
  // 1.0, -2.5, +inf, the smallest subnormal, -0.0.
  const uint16_t bits[] = {0x3f80, 0xc020, 0x7f80, 0x0001, 0x8000};
  writeFile(in_ + "/Cast.op.1.1.1",
            binFileBytes({{Io::kOutput,
                           DType::kBFloat16,
                           {5},
                           std::string(reinterpret_cast<const char*>(bits), sizeof bits)}}));
  ASSERT_EQ(convert({in_, "-o", out_}).rc, 0);
  NpyParts npy = splitNpy(readFile(out_ + "/Cast.op.1.1.1.output.0.5.npy"));
  EXPECT_THAT(npy.dict, HasSubstr("'descr': '<f4'"));
  ASSERT_EQ(npy.data.size(), 20u);
  for (size_t i = 0; i < 5; ++i) {
    uint32_t got;
    std::memcpy(&got, npy.data.data() + 4 * i, 4);
    EXPECT_EQ(got, static_cast<uint32_t>(bits[i]) << 16) << i;
  }
  float first;
  std::memcpy(&first, npy.data.data(), 4);
  EXPECT_EQ(first, 1.0f);
}

TEST_F(ConvertTest, Int4UnpacksLowNibbleFirstWithSign) {
  // 0x21: 1, 2; 0xf8: -8, -1; 0x07: 7 (the high nibble of the last byte is padding).
  writeFile(in_ + "/Quant.op.1.1.1",
            binFileBytes({{Io::kInput, DType::kInt4, {5}, std::string("\x21\xf8\x07", 3)}}));
  ASSERT_EQ(convert({in_, "-o", out_}).rc, 0);
  NpyParts npy = splitNpy(readFile(out_ + "/Quant.op.1.1.1.input.0.5.npy"));
  EXPECT_THAT(npy.dict, HasSubstr("'descr': '|i1'"));
  EXPECT_EQ(npy.data, std::string("\x01\x02\xf8\xff\x07", 5));
}

TEST_F(ConvertTest, Uint1BecomesUint8) {
  writeFile(in_ + "/Mask.op.1.1.1",
            binFileBytes({{Io::kOutput, DType::kUInt1, {4}, std::string("\x01\x00\x01\x01", 4)}}));
  ASSERT_EQ(convert({in_, "-o", out_}).rc, 0);
  NpyParts npy = splitNpy(readFile(out_ + "/Mask.op.1.1.1.output.0.4.npy"));
  EXPECT_THAT(npy.dict, HasSubstr("'descr': '|u1'"));
  EXPECT_EQ(npy.data, std::string("\x01\x00\x01\x01", 4));
}

TEST_F(ConvertTest, BadSizesRejectedNamingFileOthersConverted) {
  const std::string good = binFileBytes({{Io::kOutput, DType::kFloat32, {2}, "abcdefgh"}});
  writeFile(in_ + "/sub/Good.op.1.1.1", good);
  writeFile(in_ + "/Truncated.op.1.1.1", good.substr(0, good.size() - 1));
  writeFile(in_ + "/Extra.op.1.1.1", good + "!");
  Outcome r = convert({in_, "-o", out_});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr(in_ + "/Truncated.op.1.1.1: sizes do not add up"));
  EXPECT_THAT(r.err, HasSubstr(in_ + "/Extra.op.1.1.1: sizes do not add up"));
  EXPECT_THAT(r.err, Not(HasSubstr("Good")));
  EXPECT_THAT(listFiles(out_), ::testing::ElementsAre("sub/Good.op.1.1.1.output.0.2.npy"));
  EXPECT_EQ(r.out, "converted 1 tensors from 1 files into " + out_ + ", 2 files rejected\n");
}

TEST_F(ConvertTest, HeaderLengthPastTheEndRejected) {
  std::string bytes(16, '\0');
  bytes[0] = 9;  // 9 > 16 - 8
  writeFile(in_ + "/Short.op.1.1.1", bytes);
  Outcome r = convert({in_ + "/Short.op.1.1.1", "-o", out_});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("Short.op.1.1.1: header length 9 is past the end"));
  EXPECT_TRUE(listFiles(out_).empty());
}

TEST_F(ConvertTest, TensorSizeNotMatchingShapeRejectedOthersConverted) {
  // The file's sizes add up, but input 0 (3 floats) says it has 8 bytes.
  writeFile(in_ + "/Add.op.1.1.1",
            binFileBytes({{Io::kInput, DType::kFloat32, {3}, "12345678"},
                          {Io::kInput, DType::kInt4, {3}, "\x12\x03"},
                          {Io::kInput, DType::kInt4, {3}, "\x12"},
                          {Io::kInput, DType::kFloat32, {int64_t{1} << 30, int64_t{1} << 27}, ""},
                          {Io::kOutput, DType::kInt8, {2}, "xy"}}));
  Outcome r = convert({in_, "-o", out_});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr(in_ + "/Add.op.1.1.1: input 0: size 8 bytes does not match shape "
                                     "[3] of float32 (12 bytes)"));
  EXPECT_THAT(r.err, HasSubstr(in_ + "/Add.op.1.1.1: input 2: size 1 bytes does not match shape "
                                     "[3] of int4 (2 bytes)"));
  EXPECT_THAT(r.err, HasSubstr(in_ + "/Add.op.1.1.1: input 3: shape has more than 2^56 elements"));
  EXPECT_THAT(r.err, Not(HasSubstr("input 1")));
  EXPECT_THAT(listFiles(out_),
              ::testing::ElementsAre("Add.op.1.1.1.input.1.3.npy", "Add.op.1.1.1.output.0.2.npy"));
  EXPECT_EQ(r.out, "converted 2 tensors from 1 files into " + out_ + ", 3 tensors not converted\n");
}

TEST_F(ConvertTest, UndecodableDataTypeNamedOthersConverted) {
  pb::DumpData data;
  data.set_version("2.0");
  auto* str = data.add_input();
  str->set_data_type(pb::DT_STRING);
  str->mutable_shape()->add_dim(2);
  str->set_size(2);
  auto* out = data.add_output();
  out->set_data_type(pb::DT_UINT8);
  out->mutable_shape()->add_dim(3);
  out->set_size(3);
  // A buffer after the outputs is read past.
  auto* buffer = data.add_buffer();
  buffer->set_size(4);
  writeFile(in_ + "/Str.op.1.1.1", binFileFromProto(data,
                                                    "ab"
                                                    "xyz"
                                                    "L1L1"));
  Outcome r = convert({in_, "-o", out_});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr(in_ + "/Str.op.1.1.1: input 0: data type DT_STRING cannot be"));
  EXPECT_THAT(listFiles(out_), ::testing::ElementsAre("Str.op.1.1.1.output.0.3.npy"));
  EXPECT_EQ(splitNpy(readFile(out_ + "/Str.op.1.1.1.output.0.3.npy")).data, "xyz");
}

TEST_F(ConvertTest, TreeKeptOtherFilesAndSymlinksIgnored) {
  const std::string bytes = binFileBytes({{Io::kOutput, DType::kUInt8, {1}, "z"}});
  writeFile(in_ + "/Top.op.1.1.1", bytes);
  writeFile(in_ + "/rank_0/Net/0/1/A.op.0.0.10", bytes);
  writeFile(in_ + "/rank_1/B.op.0.0.11", bytes);
  writeFile(in_ + "/rank_1/notes.txt", "hello");
  writeFile(in_ + "/rank_1/C.op.x.0.11", bytes);      // task id not decimal
  writeFile(in_ + "/rank_1/D.op.0.0.11.npy", bytes);  // six fields
  writeFile(tmp_.path() + "/elsewhere/E.op.0.0.12", bytes);
  fs::create_symlink(tmp_.path() + "/elsewhere/E.op.0.0.12", in_ + "/rank_1/E.op.0.0.12");
  fs::create_directory_symlink(tmp_.path() + "/elsewhere", in_ + "/linked");
  Outcome r = convert({in_, "--output", out_});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(listFiles(out_), ::testing::ElementsAre("Top.op.1.1.1.output.0.1.npy",
                                                      "rank_0/Net/0/1/A.op.0.0.10.output.0.1.npy",
                                                      "rank_1/B.op.0.0.11.output.0.1.npy"));
  EXPECT_EQ(r.out, "converted 3 tensors from 3 files into " + out_ + "\n");
}

TEST_F(ConvertTest, SingleFileGoesIntoOutAsNamedWithMode0644AndNoTemporaries) {
  writeFile(in_ + "/deep/One.op.1.1.1", binFileBytes({{Io::kOutput, DType::kInt32, {1}, "abcd"}}));
  Outcome r = convert({in_ + "/deep/One.op.1.1.1", "-o", out_ + "/new/dir"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(listFiles(out_), ::testing::ElementsAre("new/dir/One.op.1.1.1.output.0.1.npy"));
  struct stat st {};
  ASSERT_EQ(::stat((out_ + "/new/dir/One.op.1.1.1.output.0.1.npy").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

TEST_F(ConvertTest, DefaultOutputIsTheCurrentDirectory) {
  writeFile(in_ + "/One.op.1.1.1", binFileBytes({{Io::kOutput, DType::kInt8, {2}, "ab"}}));
  const fs::path before = fs::current_path();
  fs::create_directories(out_);
  fs::current_path(out_);
  Outcome r = convert({in_});
  fs::current_path(before);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(listFiles(out_), ::testing::ElementsAre("One.op.1.1.1.output.0.2.npy"));
  EXPECT_EQ(r.out, "converted 1 tensors from 1 files into .\n");
}

TEST_F(ConvertTest, MissingInputIsNamed) {
  Outcome r = convert({in_ + "/nope", "-o", out_});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr(in_ + "/nope: no such file or directory"));
}

TEST_F(ConvertTest, UsageErrorsExit2AndHelpExits0) {
  Outcome none = convert({});
  EXPECT_EQ(none.rc, 2);
  EXPECT_THAT(none.err, HasSubstr("missing IN"));
  Outcome unknown = convert({in_, "--frobnicate"});
  EXPECT_EQ(unknown.rc, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown option '--frobnicate'"));
  Outcome no_value = convert({in_, "-o"});
  EXPECT_EQ(no_value.rc, 2);
  EXPECT_THAT(no_value.err, HasSubstr("-o needs a value"));
  EXPECT_EQ(convert({in_, in_}).rc, 2);
  EXPECT_FALSE(fs::exists(out_));
  for (const char* help : {"-h", "--help"}) {
    Outcome r = convert({help});
    EXPECT_EQ(r.rc, 0);
    EXPECT_THAT(r.out, HasSubstr("usage: dumpctl convert IN [-o OUT]"));
    EXPECT_EQ(r.err, "");
  }
}

TEST(ConvertBinFileTest, WriteFailureNamesTensorAndLeavesNoFile) {
  TempDir tmp;
  const std::string path = tmp.path() + "/Big.op.1.1.1";
  writeFile(path, binFileBytes({{Io::kOutput, DType::kInt8, {4}, "abcd"},
                                {Io::kOutput, DType::kInt8, {4096}, std::string(4096, 'q')}}));
  storage::MemoryFileSystem memory;
  memory.setCapacity(1024);  // the first .npy fits, the second does not
  auto dir = memory.openDirectory("", {});
  ASSERT_TRUE(dir.has_value());
  std::ostringstream err;
  ConvertCounts counts;
  convertBinFile({path, "", "Big.op.1.1.1"}, **dir, 0644, err, counts);
  EXPECT_EQ(counts.files_read, 1u);
  EXPECT_EQ(counts.tensors_written, 1u);
  EXPECT_EQ(counts.tensors_failed, 1u);
  EXPECT_THAT(err.str(), HasSubstr(path + ": output 1: not written"));
  std::vector<std::string> paths;
  for (const auto& e : memory.list()) paths.push_back(e.path);
  EXPECT_THAT(paths, ::testing::ElementsAre("Big.op.1.1.1.output.0.4.npy"));
}

}  // namespace
}  // namespace dumpd::tools
