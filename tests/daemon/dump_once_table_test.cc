// DumpOnceTable: a repeat finds the memo of the tensor it names only within the step, with
// the same dtype and shape; a repeat of a tensor the flight recorder keeps unwritten is
// refused unless the repeat is kept too; the step's table is bounded.
#include "daemon/dump_once_table.h"

#include <gtest/gtest.h>

#include <vector>

#include "ipc/op_codec.h"

namespace dumpd::daemon {
namespace {

const std::vector<int64_t> kShape{2, 3};

DumpOnceTable::Tensor tensorOf(uint32_t iteration, DType dtype = DType::kFloat32,
                               const std::vector<int64_t>& shape = kShape) {
  return {/*graph_id=*/0, iteration, dtype, shape};
}

TEST(DumpOnceTable, ARepeatFindsTheMemoOfTheTensorItNames) {
  DumpOnceTable table;
  auto memo = table.remember(/*sequence=*/4, /*index=*/1, tensorOf(2), /*kept=*/false);
  ASSERT_NE(memo, nullptr);
  DumpOnceTable::Repeat r = table.find({4, 1, 0}, tensorOf(2), false);
  EXPECT_EQ(r.memo, memo) << r.problem;
  EXPECT_TRUE(r.problem.empty());
  // Another tensor of that record, or another record: unknown.
  EXPECT_EQ(table.find({4, 0, 0}, tensorOf(2), false).memo, nullptr);
  EXPECT_EQ(table.find({5, 1, 0}, tensorOf(2), false).problem,
            " repeats a tensor this step did not dump (lost, or over the limit of remembered "
            "tensors)");
}

TEST(DumpOnceTable, ARepeatOfAnotherStepDtypeOrShapeIsRefused) {
  DumpOnceTable table;
  ASSERT_NE(table.remember(4, 0, tensorOf(2), false), nullptr);
  const std::string other = " repeats a tensor of another step, dtype or shape";
  EXPECT_EQ(table.find({4, 0, 0}, tensorOf(3), false).problem, other);
  EXPECT_EQ(table.find({4, 0, 0}, tensorOf(2, DType::kFloat16), false).problem, other);
  EXPECT_EQ(table.find({4, 0, 0}, tensorOf(2, DType::kFloat32, {3, 2}), false).problem, other);
  EXPECT_EQ(table.find({4, 0, 0}, tensorOf(2, DType::kFloat32, {2, 3, 1}), false).problem, other);
}

TEST(DumpOnceTable, AStepMarkForgetsEverything) {
  DumpOnceTable table;
  ASSERT_NE(table.remember(4, 0, tensorOf(2), false), nullptr);
  table.clear();
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.find({4, 0, 0}, tensorOf(2), false).memo, nullptr);
}

TEST(DumpOnceTable, OnlyAKeptRepeatMayNameAnUnwrittenKeptSource) {
  DumpOnceTable table;
  auto source = table.remember(4, 0, tensorOf(2), /*kept=*/true);
  ASSERT_NE(source, nullptr);
  // A written repeat would wait for a file the recorder may never write.
  EXPECT_EQ(table.find({4, 0, 0}, tensorOf(2), /*kept=*/false).problem,
            " repeats a tensor the flight recorder keeps unwritten");
  EXPECT_EQ(table.find({4, 0, 0}, tensorOf(2), /*kept=*/true).memo, source);
  // Once its fate is known (written, or discarded) any repeat may use it.
  storage::MemoResult done;
  done.error = "discarded";
  source->publish(std::move(done));
  EXPECT_EQ(table.find({4, 0, 0}, tensorOf(2), false).memo, source);
  // A trigger writes every kept record in order: their repeats may wait for them.
  auto second = table.remember(5, 0, tensorOf(2), /*kept=*/true);
  table.keptWritten();
  EXPECT_EQ(table.find({5, 0, 0}, tensorOf(2), false).memo, second);
}

TEST(DumpOnceTable, AStepRemembersAtMostTheLimit) {
  DumpOnceTable table;
  for (uint32_t i = 0; i < ipc::kMaxMemoTensorsPerStep; ++i) {
    ASSERT_NE(table.remember(i + 1, 0, tensorOf(2), false), nullptr) << i;
  }
  EXPECT_EQ(table.remember(ipc::kMaxMemoTensorsPerStep + 1, 0, tensorOf(2), false), nullptr);
  EXPECT_EQ(table.size(), ipc::kMaxMemoTensorsPerStep);
}

TEST(DumpOnceTable, ANameOutOfRangeFindsNothingWhereItsKeyWouldWrapOntoAnother) {
  DumpOnceTable table;
  ASSERT_NE(table.remember(1, 0, tensorOf(2), false), nullptr);
  // Unchecked, both would land on the key of (1, 0).
  EXPECT_EQ(table.find({0, ipc::kMaxTensorsPerRecord, 0}, tensorOf(2), false).memo, nullptr);
  EXPECT_EQ(table.find({(uint64_t{1} << 52) + 1, 0, 0}, tensorOf(2), false).memo, nullptr);
  EXPECT_NE(table.find({1, 0, 0}, tensorOf(2), false).memo, nullptr);
}

}  // namespace
}  // namespace dumpd::daemon
