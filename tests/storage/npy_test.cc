#include "storage/format/npy.h"

#include <gtest/gtest.h>
#include <lz4frame.h>

#include <bit>
#include <cstring>
#include <vector>

namespace dumpd::storage {
namespace {

// Records what the writer hands to the file, to check the write path itself.
class RecordingFile final : public WritableFile {
 public:
  const std::string& path() const override { return path_; }
  uint64_t bytesWritten() const override { return data.size(); }
  Status write(std::span<const ConstBuffer> buffers) override {
    ++calls;
    std::vector<const std::byte*> ptrs;
    for (ConstBuffer b : buffers) {
      ptrs.push_back(b.data());
      data.append(reinterpret_cast<const char*>(b.data()), b.size());
    }
    buffer_pointers.push_back(ptrs);
    return {};
  }
  Status sync() override { return {}; }
  Status commit() override { return {}; }
  void abort() override {}

  std::string data;
  int calls = 0;
  std::vector<std::vector<const std::byte*>> buffer_pointers;

 private:
  std::string path_ = "x.npy";
};

std::string header(DType t, std::vector<int64_t> shape) {
  std::string h;
  buildNpyHeader(h, t, shape);
  return h;
}

uint32_t headerLen(const std::string& h) {
  return static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8);
}

TEST(NpyTest, HeaderIsNpy10PaddedTo64WithNewline) {
  std::string h = header(DType::kFloat32, {2, 3});
  ASSERT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(headerLen(h) + 10, h.size());
  // MindSpore's npy_header.cc: a comma after every dimension, no spaces.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,3,), }";
  EXPECT_EQ(h.substr(10, dict.size()), dict);
  EXPECT_EQ(h.back(), '\n');
  EXPECT_EQ(h.find_first_not_of(' ', 10 + dict.size()), h.size() - 1);
}

TEST(NpyTest, HeaderShapesAsMindSporeWritesThem) {
  EXPECT_NE(header(DType::kInt8, {3}).find("'shape': (3,), }"), std::string::npos);
  EXPECT_NE(header(DType::kInt8, {2, 3, 4, 5}).find("'shape': (2,3,4,5,), }"), std::string::npos);
  EXPECT_NE(header(DType::kInt8, {}).find("'shape': (), }"), std::string::npos);
  EXPECT_NE(header(DType::kBool, {0, 4}).find("'descr': '|b1'"), std::string::npos);
  // The stored dtype of a converted source dtype.
  EXPECT_NE(header(DType::kBFloat16, {2}).find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(header(DType::kInt4, {2}).find("'descr': '|i1'"), std::string::npos);
}

TEST(NpyTest, HeaderPadsLikeNumpyWhenAlreadyAligned) {
  // numpy always adds at least one space: find a dict whose length makes 10 + len + 1 == 64k.
  for (int64_t d = 1; d < 100000; d *= 10) {
    std::string h = header(DType::kFloat64, {d});
    size_t dict_end = h.find('}') + 1;
    EXPECT_GE(h.size() - 1 - dict_end, 1u) << d;
    EXPECT_LE(h.size() - 1 - dict_end, 64u) << d;
  }
}

TEST(NpyTest, HugeHeaderSwitchesToVersion2) {
  std::vector<int64_t> shape(40000, 1);
  std::string h;
  buildNpyHeader(h, DType::kFloat32, shape);
  ASSERT_GT(h.size(), 65535u);
  EXPECT_EQ(h[6], 2);
  EXPECT_EQ(h[7], 0);
  uint32_t len = 0;
  std::memcpy(&len, h.data() + 8, 4);
  EXPECT_EQ(len + 12, h.size());
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(12, 10), "{'descr': ");
}

TEST(NpyTest, PlainDataIsWrittenStraightFromTheCallersMemoryInOneWrite) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> shape = {2, 3};
  NpyPayload p{DType::kFloat32, shape, 6,
               ConstBuffer(reinterpret_cast<const std::byte*>(v.data()), 24)};
  std::string h = header(DType::kFloat32, shape);
  RecordingFile f;
  ASSERT_TRUE(writeNpy(f, p, h, false));
  EXPECT_EQ(f.calls, 1);
  ASSERT_EQ(f.buffer_pointers[0].size(), 2u);
  EXPECT_EQ(f.buffer_pointers[0][1], p.data.data());
  EXPECT_EQ(f.data.size(), h.size() + 24);
  EXPECT_EQ(npyFileSize(p, h.size()), f.data.size());
  EXPECT_EQ(0, std::memcmp(f.data.data() + h.size(), v.data(), 24));
}

TEST(NpyTest, SampledPayloadWritesOnlyLeadingElements) {
  std::vector<int32_t> v(1000);
  for (int i = 0; i < 1000; ++i) v[i] = i;
  std::vector<int64_t> shape = {10};
  NpyPayload p{DType::kInt32, shape, 10,
               ConstBuffer(reinterpret_cast<const std::byte*>(v.data()), v.size() * 4)};
  std::string h = header(DType::kInt32, shape);
  RecordingFile f;
  ASSERT_TRUE(writeNpy(f, p, h, false));
  EXPECT_EQ(f.data.size(), h.size() + 40);
}

TEST(NpyTest, BFloat16BecomesExactFloat32AcrossChunks) {
  const uint64_t n = (uint64_t{1} << 18) + 3;  // more than one conversion chunk
  std::vector<uint16_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
  std::vector<int64_t> shape = {static_cast<int64_t>(n)};
  NpyPayload p{DType::kBFloat16, shape, n,
               ConstBuffer(reinterpret_cast<const std::byte*>(v.data()), n * 2)};
  std::string h = header(DType::kBFloat16, shape);
  RecordingFile f;
  ASSERT_TRUE(writeNpy(f, p, h, false));
  ASSERT_EQ(f.data.size(), h.size() + 4 * n);
  EXPECT_GT(f.calls, 1);
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, f.data.data() + h.size() + 4 * i, 4);
    ASSERT_EQ(bits, static_cast<uint32_t>(v[i]) << 16) << i;
  }
}

TEST(NpyTest, Int4BecomesInt8LowNibbleFirstSignExtended) {
  std::vector<uint8_t> packed = {0x7F, 0x08, 0x9A};  // -1 7 | -8 0 | -6 (high nibble unused)
  std::vector<int64_t> shape = {5};
  NpyPayload p{DType::kInt4, shape, 5,
               ConstBuffer(reinterpret_cast<const std::byte*>(packed.data()), 3)};
  std::string h = header(DType::kInt4, shape);
  RecordingFile f;
  ASSERT_TRUE(writeNpy(f, p, h, false));
  ASSERT_EQ(f.data.size(), h.size() + 5);
  std::vector<int8_t> got(5);
  std::memcpy(got.data(), f.data.data() + h.size(), 5);
  EXPECT_EQ(got, (std::vector<int8_t>{-1, 7, -8, 0, -6}));
}

TEST(NpyTest, UInt1IsWrittenAsItsBytes) {
  EXPECT_FALSE(needsConversion(DType::kUInt1));
  EXPECT_TRUE(needsConversion(DType::kBFloat16));
  EXPECT_TRUE(needsConversion(DType::kInt4));
}

std::string lz4Decompress(const std::string& in) {
  LZ4F_dctx* ctx = nullptr;
  EXPECT_FALSE(LZ4F_isError(LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION)));
  std::string out;
  const char* src = in.data();
  size_t left = in.size();
  char buf[65536];
  while (left > 0) {
    size_t dst = sizeof buf, src_size = left;
    size_t r = LZ4F_decompress(ctx, buf, &dst, src, &src_size, nullptr);
    EXPECT_FALSE(LZ4F_isError(r)) << LZ4F_getErrorName(r);
    if (LZ4F_isError(r)) break;
    out.append(buf, dst);
    src += src_size;
    left -= src_size;
    if (r == 0) break;
  }
  LZ4F_freeDecompressionContext(ctx);
  return out;
}

TEST(NpyTest, Lz4FrameDecompressesToTheExactNpy) {
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const uint64_t n = 300000;  // several LZ4 blocks
    std::vector<uint16_t> v(n * 2);
    for (uint64_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(i % 977);
    uint64_t elements = t == DType::kFloat32 ? n : n * 2;
    std::vector<int64_t> shape = {static_cast<int64_t>(elements)};
    NpyPayload p{t, shape, elements,
                 ConstBuffer(reinterpret_cast<const std::byte*>(v.data()), v.size() * 2)};
    std::string h = header(t, shape);
    RecordingFile plain, packed;
    ASSERT_TRUE(writeNpy(plain, p, h, false));
    ASSERT_TRUE(writeNpy(packed, p, h, true));
    EXPECT_LT(packed.data.size(), plain.data.size());
    EXPECT_EQ(lz4Decompress(packed.data), plain.data);
  }
}

}  // namespace
}  // namespace dumpd::storage
