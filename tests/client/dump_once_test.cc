// The client's dump-once table: which tensor a repeat names, and when it names none.
#include "client/dump_once.h"

#include <gtest/gtest.h>

#include "ipc/ring_format.h"

namespace dumpd::client {
namespace {

struct Sample {
  std::vector<int64_t> shape{4, 8};
  float data[32] = {};
  Tensor tensor(uint64_t identity) const {
    Tensor t;
    t.dtype = DType::kFloat32;
    t.shape = shape;
    t.data = data;
    t.bytes = sizeof data;
    t.identity = identity;
    return t;
  }
};

TEST(DumpOnceTable, ARepeatNamesWhereTheFirstWent) {
  Sample s;
  DumpOnceTable table;
  EXPECT_FALSE(table.find(s.tensor(7)).has_value());
  table.remember(s.tensor(7), {12, 3});
  auto ref = table.find(s.tensor(7));
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->sequence, 12u);
  EXPECT_EQ(ref->tensor, 3u);
  EXPECT_FALSE(table.find(s.tensor(8)).has_value()) << "another identity";
  EXPECT_FALSE(table.find(s.tensor(0)).has_value()) << "identity 0 never repeats";
  table.clear();
  EXPECT_FALSE(table.find(s.tensor(7)).has_value()) << "a new step forgets the last";
}

TEST(DumpOnceTable, AnIdentityThatDisagreesWithTheTensorIsNotARepeat) {
  Sample s;
  DumpOnceTable table;
  table.remember(s.tensor(5), {1, 0});
  Tensor t = s.tensor(5);
  t.dtype = DType::kInt32;
  EXPECT_FALSE(table.find(t).has_value()) << "dtype";
  t = s.tensor(5);
  t.data = s.data + 1;
  EXPECT_FALSE(table.find(t).has_value()) << "address";
  const std::vector<int64_t> other{8, 4};
  t = s.tensor(5);
  t.shape = other;
  EXPECT_FALSE(table.find(t).has_value()) << "shape";
  t = s.tensor(5);
  t.memory = Memory::kCuda;
  EXPECT_FALSE(table.find(t).has_value()) << "memory";
  t = s.tensor(5);
  EXPECT_TRUE(DumpOnceTable::sameTensor(t, s.tensor(5)));
  EXPECT_FALSE(DumpOnceTable::sameTensor(t, s.tensor(6)));
}

TEST(DumpOnceTable, AStridedRepeatNeedsTheSameStrides) {
  Sample s;
  DumpOnceTable table;
  // The (8, 4) transpose of the (4, 8) buffer.
  const std::vector<int64_t> shape{8, 4};
  const std::vector<int64_t> transposed{4, 32};
  const std::vector<int64_t> c_order{16, 4};
  Tensor t = s.tensor(9);
  t.shape = shape;
  t.strides = transposed;
  {
    // Remembered from a copy of the strides that then goes away: the table keeps its own.
    std::vector<int64_t> temporary = transposed;
    Tensor first = t;
    first.strides = temporary;
    table.remember(first, {4, 1});
    temporary.assign({0, 0});
  }
  ASSERT_TRUE(table.find(t).has_value()) << "the same strided view";
  Tensor contiguous = t;
  contiguous.strides = {};
  EXPECT_FALSE(table.find(contiguous).has_value()) << "same bytes read in another order";
  contiguous.strides = c_order;
  EXPECT_FALSE(table.find(contiguous).has_value()) << "C-ordered strides given explicitly";
  // A C-contiguous tensor matches whether its strides are given or not.
  Tensor plain = s.tensor(10);
  table.remember(plain, {5, 0});
  const std::vector<int64_t> explicit_c{32, 4};
  plain.strides = explicit_c;
  EXPECT_TRUE(table.find(plain).has_value());
}

TEST(DumpOnceTable, RemembersNoMoreThanTheDaemonKeepsPerStep) {
  Sample s;
  DumpOnceTable table;
  for (uint32_t i = 1; i <= ipc::kMaxMemoTensorsPerStep; ++i) {
    ASSERT_TRUE(table.canRemember(0));
    table.remember(s.tensor(i), {i, 0});
  }
  EXPECT_FALSE(table.canRemember(0));
  table.remember(s.tensor(999999), {1, 0});
  EXPECT_FALSE(table.find(s.tensor(999999)).has_value());
  EXPECT_TRUE(table.find(s.tensor(1)).has_value());
  table.clear();
  EXPECT_TRUE(table.canRemember(ipc::kMaxMemoTensorsPerStep - 1));
  EXPECT_FALSE(table.canRemember(ipc::kMaxMemoTensorsPerStep));
}

}  // namespace
}  // namespace dumpd::client
