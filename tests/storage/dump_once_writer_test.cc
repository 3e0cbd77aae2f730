// Dump once in the writer: a tensor that repeats an earlier one (TensorView::same_as) gets
// that tensor's file as a hard link (a copy without links) and its statistics row, and a
// repeat of a tensor that failed or was never written fails or drops without hanging.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <future>
#include <thread>

#include "storage/fs/memory_file_system.h"
#include "storage/writer/job_writer.h"
#include "storage/writer/tensor_memo.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::makePlan;
using testing::OwnedOp;
using testing::TempDir;

constexpr uint64_t kTs = 1700000000000000;
constexpr char kDir[] = "rank_0/Net/0/0";

std::shared_ptr<TensorMemo> memoFor(const testing::OwnedTensor& t, uint32_t iteration = 0) {
  return std::make_shared<TensorMemo>(0, iteration, t.dtype, t.shape);
}

// Op "A" producing y; op "B" taking y (a repeat) and producing z.
struct Chain {
  OwnedOp a;
  OwnedOp b;
  std::shared_ptr<TensorMemo> y_memo;

  explicit Chain(std::vector<float> y = {1, -2, 3, 0}) {
    a.op_type = "Relu";
    a.op_name = "Default/Relu-op1";
    a.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 2}, y, kTs));
    b.op_type = "Neg";
    b.op_name = "Default/Neg-op2";
    testing::OwnedTensor repeat = floatTensor(Io::kInput, 0, {2, 2}, {}, kTs + 1);
    b.tensors.push_back(repeat);
    std::vector<float> z;
    for (float v : y) z.push_back(-v);
    b.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 2}, z, kTs + 2));
    y_memo = memoFor(a.tensors[0]);
  }
  OpRecord recordA() {
    OpRecord r = a.record();
    a.views[0].memo = y_memo.get();
    return r;
  }
  OpRecord recordB() {
    OpRecord r = b.record();
    b.views[0].same_as = y_memo.get();
    return r;
  }
};

std::string rowsOf(const std::string& csv, std::string_view op_name) {
  std::string out;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t end = csv.find('\n', pos);
    std::string line = csv.substr(pos, end - pos);
    if (line.find(op_name) != std::string::npos) out += line + "\n";
    pos = end + 1;
  }
  return out;
}

class DumpOnceWriterTest : public ::testing::Test {
 protected:
  std::unique_ptr<JobWriter> make(const config::DumpPlan& plan, JobOptions options = {}) {
    auto w = JobWriter::create(mem_, plan, std::move(options));
    EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().message);
    return w ? std::move(w.value()) : nullptr;
  }
  std::string read(const std::string& path) { return mem_->readFile(path).value_or("<absent>"); }
  std::vector<std::string> npyFiles() {
    std::vector<std::string> out;
    for (const auto& e : mem_->list()) {
      if (e.kind == MemoryFileSystem::Entry::Kind::kFile &&
          e.path.find(".npy") != std::string::npos) {
        out.push_back(e.path);
      }
    }
    return out;
  }
  std::string fileOf(std::string_view op_type, std::string_view io) {
    for (const std::string& p : npyFiles()) {
      const std::string name = p.substr(p.rfind('/') + 1);
      if (name.rfind(std::string(op_type) + ".", 0) == 0 &&
          name.find("." + std::string(io) + ".") != std::string::npos) {
        return p;
      }
    }
    return "";
  }

  std::shared_ptr<MemoryFileSystem> mem_ = std::make_shared<MemoryFileSystem>();
};

TEST_F(DumpOnceWriterTest, ARepeatGetsTheSameFileBytesAndStatisticsRow) {
  auto w = make(makePlan(config::SavedData::kFull));
  Chain c;
  ASSERT_TRUE(w->writeOp(c.recordA()).has_value());
  ASSERT_TRUE(c.y_memo->published());
  auto r = w->writeOp(c.recordB());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r.value().tensors_written, 2u);
  EXPECT_EQ(r.value().tensors_linked, 1u);
  EXPECT_EQ(w->counters().tensors_linked, 1u);

  const std::string y = fileOf("Relu", "output");
  const std::string repeat = fileOf("Neg", "input");
  ASSERT_FALSE(y.empty());
  ASSERT_FALSE(repeat.empty());
  EXPECT_NE(y, repeat);
  EXPECT_EQ(read(repeat), read(y));
  EXPECT_NE(repeat.find(".1700000000000001.input.0."), std::string::npos)
      << "the repeat keeps its own name and timestamp: " << repeat;

  // The row of B's input has A's output's statistics under B's own name.
  const std::string csv = read(std::string(kDir) + "/statistic.csv");
  const std::string a_row = rowsOf(csv, "Relu-op1");
  const std::string b_rows = rowsOf(csv, "Neg-op2");
  ASSERT_FALSE(a_row.empty());
  const std::string a_values = a_row.substr(a_row.find(",output,0,") + 10);
  EXPECT_NE(b_rows.find(",input,0," + a_values), std::string::npos) << csv;
}

TEST_F(DumpOnceWriterTest, StatisticsOnlyJobsCopyTheRowAndWriteNoFile) {
  auto w = make(makePlan(config::SavedData::kStatistic));
  Chain c({5, 6, -7, 8});
  ASSERT_TRUE(w->writeOp(c.recordA()).has_value());
  auto r = w->writeOp(c.recordB());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r.value().tensors_written, 2u);
  EXPECT_EQ(r.value().tensors_linked, 0u);
  EXPECT_TRUE(npyFiles().empty());
  const std::string csv = read(std::string(kDir) + "/statistic.csv");
  const std::string a_row = rowsOf(csv, "Relu-op1");
  const std::string a_values = a_row.substr(a_row.find(",output,0,") + 10);
  EXPECT_NE(rowsOf(csv, "Neg-op2").find(",input,0," + a_values), std::string::npos) << csv;
}

TEST_F(DumpOnceWriterTest, ARepeatWaitsForItsSourceWrittenOnAnotherThread) {
  auto w = make(makePlan(config::SavedData::kFull));
  Chain c;
  OpRecord b = c.recordB();
  auto waiting = std::async(std::launch::async, [&] { return w->writeOp(b); });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout)
      << "the repeat must wait for its source";
  ASSERT_TRUE(w->writeOp(c.recordA()).has_value());
  auto r = waiting.get();
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r.value().tensors_linked, 1u);
  EXPECT_EQ(read(fileOf("Neg", "input")), read(fileOf("Relu", "output")));
}

// The repeat fails alone: the rest of its op (B's own output) is written, so a lost source
// does not take every later op of a chain with it.
TEST_F(DumpOnceWriterTest, ARepeatOfAFailedTensorFailsAloneNamingWhy) {
  auto w = make(makePlan(config::SavedData::kFull));
  Chain c;
  OpRecord a = c.recordA();
  c.a.views[0].data = c.a.views[0].data.first(3);  // malformed: A writes nothing
  ASSERT_FALSE(w->writeOp(a).has_value());
  ASSERT_TRUE(c.y_memo->published()) << "a failed op must settle its memos";
  const uint64_t errors = w->counters().write_errors;  // A's
  auto r = w->writeOp(c.recordB());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r.value().tensors_failed, 1u);
  EXPECT_EQ(r.value().tensors_written, 1u);
  EXPECT_NE(r.value().failure.find("Default/Neg-op2 input 0 repeats a tensor that was not written"),
            std::string::npos)
      << r.value().failure;
  EXPECT_EQ(npyFiles(), std::vector<std::string>{fileOf("Neg", "output")});
  EXPECT_EQ(w->counters().write_errors, errors) << "B had nothing fail to write";
  const std::string csv = read(std::string(kDir) + "/statistic.csv");
  EXPECT_EQ(rowsOf(csv, "Neg-op2").find(",input,"), std::string::npos) << csv;
  EXPECT_NE(rowsOf(csv, "Neg-op2").find(",output,"), std::string::npos) << csv;
}

TEST_F(DumpOnceWriterTest, MemosOfOpsThatAreNotDumpedAreSettled) {
  // Overflow mode: A has no inf/NaN output, so nothing of it is written.
  config::DumpPlan plan = makePlan(config::SavedData::kFull);
  plan.op_debug_mode = 3;
  auto w = make(plan);
  Chain c;
  ASSERT_TRUE(w->writeOp(c.recordA()).has_value());
  ASSERT_TRUE(c.y_memo->published());
  EXPECT_FALSE(c.y_memo->wait().ok);

  // input_output 2 (outputs only): an input memo is settled as not dumped.
  config::DumpPlan outputs = makePlan(config::SavedData::kFull);
  outputs.input_output = config::IoSelect::kOutputs;
  auto w2 = make(outputs);
  Chain d;
  OpRecord b = d.recordB();
  auto in_memo = memoFor(d.b.tensors[0]);
  d.b.views[0].same_as = nullptr;
  d.b.views[0].data = d.a.tensors[0].bytes;
  d.b.views[0].memo = in_memo.get();
  ASSERT_TRUE(w2->writeOp(b).has_value());
  ASSERT_TRUE(in_memo->published());
  EXPECT_FALSE(in_memo->wait().ok);
}

TEST_F(DumpOnceWriterTest, ARepeatOfADroppedPayloadIsDroppedButKeepsItsRow) {
  JobOptions o;
  o.quota_bytes = 100;  // the 144-byte npy of y does not fit
  auto w = make(makePlan(config::SavedData::kFull), o);
  Chain c;
  auto a = w->writeOp(c.recordA());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a.value().tensors_dropped, 1u);
  auto r = w->writeOp(c.recordB());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_GE(r.value().tensors_dropped, 1u);
  EXPECT_EQ(r.value().tensors_linked, 0u);
  EXPECT_TRUE(fileOf("Neg", "input").empty());
  EXPECT_FALSE(rowsOf(read(std::string(kDir) + "/statistic.csv"), "Neg-op2").empty());
}

TEST_F(DumpOnceWriterTest, ARepeatOfADifferentShapeIsRefusedBeforeAnythingIsWritten) {
  auto w = make(makePlan(config::SavedData::kFull));
  Chain c;
  ASSERT_TRUE(w->writeOp(c.recordA()).has_value());
  auto other = std::make_shared<TensorMemo>(0, 0, DType::kFloat32, std::vector<int64_t>{4});
  other->publish(c.y_memo->wait());
  OpRecord b = c.recordB();
  c.b.views[0].same_as = other.get();
  auto r = w->writeOp(b);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("another dtype or shape"), std::string::npos)
      << r.error().message;
  EXPECT_TRUE(fileOf("Neg", "output").empty());
}

TEST(DumpOnceWriterPosixTest, ARepeatIsAHardLinkOnARealFileSystem) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  ASSERT_TRUE(fs.has_value());
  auto w = JobWriter::create(fs.value(), makePlan(config::SavedData::kTensor), {});
  ASSERT_TRUE(w.has_value());
  Chain c;
  ASSERT_TRUE(w.value()->writeOp(c.recordA()).has_value());
  ASSERT_TRUE(w.value()->writeOp(c.recordB()).has_value());
  const std::string dir = root.path() + "/" + kDir + "/";
  const std::string y = dir +
                        "Relu.Default_Relu-op1.0.0.1700000000000000.output.0.DefaultFormat."
                        "float32.npy";
  const std::string repeat = dir +
                             "Neg.Default_Neg-op2.0.0.1700000000000001.input.0."
                             "DefaultFormat.float32.npy";
  struct stat a {
  }, b{};
  ASSERT_EQ(::stat(y.c_str(), &a), 0) << y;
  ASSERT_EQ(::stat(repeat.c_str(), &b), 0) << repeat;
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(b.st_nlink, 2u);
  EXPECT_EQ(b.st_mode & 0777, 0400u);
}

}  // namespace
}  // namespace dumpd::storage
