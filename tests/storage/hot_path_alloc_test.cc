// The per-tensor formatting and statistics code allocates nothing once warm: names, rows and
// headers go into reused buffers, statistics into fixed accumulators.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "storage/format/names.h"
#include "storage/format/npy.h"
#include "storage/format/statistic_csv.h"
#include "storage/format/statistics.h"
#include "storage/writer/bin_op.h"

namespace {
std::atomic<size_t> g_allocations{0};
}  // namespace

// Counting replacements of the global allocation functions (malloc/free underneath, which
// GCC's -Wmismatched-new-delete cannot tell is deliberate).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace dumpd::storage {
namespace {

class NullFile final : public WritableFile {
 public:
  const std::string& path() const override { return path_; }
  uint64_t bytesWritten() const override { return written_; }
  Status write(std::span<const ConstBuffer> buffers) override {
    for (ConstBuffer b : buffers) written_ += b.size();
    return {};
  }
  Status sync() override { return {}; }
  Status commit() override { return {}; }
  void abort() override {}

 private:
  std::string path_ = "null";
  uint64_t written_ = 0;
};

TEST(HotPathAllocationTest, FormattingStatisticsAndNpyWritingAllocateNothingOnceWarm) {
  std::vector<float> values(100000, 1.5f);
  std::vector<uint16_t> bf16(100000, 0x3FC0);
  std::vector<int64_t> shape = {100, 1000};
  const std::vector<config::StatCategory> categories = {
      config::StatCategory::kMax,    config::StatCategory::kMin, config::StatCategory::kAvg,
      config::StatCategory::kL2Norm, config::StatCategory::kMd5, config::StatCategory::kSha1};
  const StatOptions options = statOptionsFor(categories);
  std::string name, header, row;
  name.reserve(512);
  row.reserve(1024);
  auto one_tensor = [&] {
    NullFile file;
    name.clear();
    appendTensorFileName(name, {"MatMul", "Default/network/MatMul-op12", 1, 2, 1700000000000000,
                                Io::kOutput, 0, "DefaultFormat", DType::kFloat32});
    TensorStats stats;
    ConstBuffer data(reinterpret_cast<const std::byte*>(values.data()), values.size() * 4);
    computeStats(DType::kFloat32, values.size(), data, options, stats);
    row.clear();
    appendStatisticRow(row,
                       {"MatMul", "Default/network/MatMul-op12", 1, 2, 1700000000000000,
                        Io::kOutput, 0, data.size(), DType::kFloat32, shape},
                       stats, categories, config::MsFormat::k26);
    buildNpyHeader(header, DType::kFloat32, shape);
    ASSERT_TRUE(writeNpy(file, {DType::kFloat32, shape, values.size(), data}, header, false));
    ConstBuffer raw(reinterpret_cast<const std::byte*>(bf16.data()), bf16.size() * 2);
    buildNpyHeader(header, DType::kBFloat16, shape);
    ASSERT_TRUE(writeNpy(file, {DType::kBFloat16, shape, bf16.size(), raw}, header, false));
    ASSERT_TRUE(writeNpy(file, {DType::kBFloat16, shape, bf16.size(), raw}, header, true));
  };
  one_tensor();  // warm: thread-local buffers and contexts
  size_t before = g_allocations.load();
  for (int i = 0; i < 10; ++i) one_tensor();
  EXPECT_EQ(g_allocations.load() - before, 0u);
}

TEST(HotPathAllocationTest, BuildingABinFileAllocatesNothingOnceWarm) {
  std::vector<float> values(4096, 0.25f);
  const std::vector<int64_t> shape = {4, 8, 16, 8};
  const ConstBuffer data(reinterpret_cast<const std::byte*>(values.data()), values.size() * 4);
  std::vector<TensorView> tensors;
  for (uint32_t slot = 0; slot < 40; ++slot) {
    TensorView t;
    t.io = slot % 2 == 0 ? Io::kInput : Io::kOutput;
    t.slot = slot / 2;
    t.shape = shape;
    t.format = "NCHW";
    t.data = data;
    tensors.push_back(t);
  }
  BinOpFile file;
  uint64_t size = 0;
  auto one_op = [&] {
    file.clear();
    for (const TensorView& t : tensors) file.add(t, t.shape, values.size(), t.format);
    file.build("Default/network-WithLossCell/_backbone-Net/conv1-Conv2d/Conv2D-op12", 1700000000);
    size = file.fileSize();
  };
  one_op();  // warm: the entries' vectors, the header string
  const size_t before = g_allocations.load();
  for (int i = 0; i < 10; ++i) one_op();
  EXPECT_EQ(g_allocations.load() - before, 0u);
  EXPECT_GT(size, tensors.size() * data.size());  // the header and every tensor
}

}  // namespace
}  // namespace dumpd::storage
