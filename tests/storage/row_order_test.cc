// statistic.csv rows in row-ticket order (JobWriter::takeRowTicket, OpRecord::row_ticket),
// whatever threads write the ops and in whatever order they finish.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "storage/fs/memory_file_system.h"
#include "storage/writer/job_writer.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

using testing::floatTensor;
using testing::makePlan;
using testing::OwnedOp;

constexpr char kCsv[] = "rank_0/Net/0/0/statistic.csv";

// Op i: input 0, input 1, output 0, named so its rows can be told apart.
OwnedOp numberedOp(int i) {
  OwnedOp op;
  op.op_name = "Default/Add-op" + std::to_string(i);
  const float x = static_cast<float>(i);
  op.tensors.push_back(floatTensor(Io::kInput, 0, {2}, {x, 1}));
  op.tensors.push_back(floatTensor(Io::kInput, 1, {2}, {x, 2}));
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {2}, {x, 3}));
  return op;
}

class RowOrderTest : public ::testing::Test {
 protected:
  std::unique_ptr<JobWriter> make(const config::DumpPlan& plan) {
    auto w = JobWriter::create(mem_, plan, {});
    EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().message);
    return w ? std::move(w.value()) : nullptr;
  }

  // "op_name io slot" of every data row of statistic.csv, in file order.
  std::vector<std::string> rows() {
    std::vector<std::string> out;
    std::istringstream in(mem_->readFile(kCsv).value_or(""));
    std::string line;
    bool header = true;
    while (std::getline(in, line)) {
      if (header) {
        header = false;
        continue;
      }
      // Op Type, Op Name, Task ID, Stream ID, Timestamp, IO, Slot: none of them quoted.
      std::vector<std::string> f;
      std::istringstream ls(line);
      std::string field;
      while (f.size() < 7 && std::getline(ls, field, ',')) f.push_back(field);
      if (f.size() < 7) {
        out.push_back("<short row: " + line + ">");
        continue;
      }
      out.push_back(f[1] + " " + f[5] + " " + f[6]);
    }
    return out;
  }

  static std::vector<std::string> expectedRows(int first, int last) {
    std::vector<std::string> want;
    for (int i = first; i <= last; ++i) {
      const std::string name = "Default/Add-op" + std::to_string(i);
      want.push_back(name + " input 0");
      want.push_back(name + " input 1");
      want.push_back(name + " output 0");
    }
    return want;
  }

  void writeWithTicket(JobWriter& w, OwnedOp op, uint64_t ticket) {
    OpRecord r = op.record();
    r.row_ticket = ticket;
    auto result = w.writeOp(r);
    EXPECT_TRUE(result.has_value()) << (result ? "" : result.error().message);
  }

  std::shared_ptr<MemoryFileSystem> mem_ = std::make_shared<MemoryFileSystem>();
};

TEST_F(RowOrderTest, ShuffledWritesOnFourThreadsAppendRowsInTicketOrder) {
  constexpr int kOps = 200;
  auto w = make(makePlan(config::SavedData::kStatistic));
  ASSERT_NE(w, nullptr);
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kOps; ++i) tickets.push_back(w->takeRowTicket());
  for (int i = 0; i < kOps; ++i) ASSERT_EQ(tickets[i], static_cast<uint64_t>(i + 1));
  std::vector<int> order(kOps);
  for (int i = 0; i < kOps; ++i) order[i] = i;
  std::mt19937 rng(2024);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int j = k; j < kOps; j += 4) {
        const int i = order[j];
        writeWithTicket(*w, numberedOp(i + 1), tickets[i]);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(rows(), expectedRows(1, kOps));
  EXPECT_EQ(w->counters().write_errors, 0u);
  EXPECT_EQ(w->counters().tensors_written, 3u * kOps);
}

TEST_F(RowOrderTest, ReversedWritesOnSeparateThreadsWaitForTheEarliestTicket) {
  constexpr int kOps = 200;
  auto w = make(makePlan(config::SavedData::kFull));
  ASSERT_NE(w, nullptr);
  std::vector<uint64_t> tickets;
  for (int i = 0; i < kOps; ++i) tickets.push_back(w->takeRowTicket());
  // Ticket 200 first, ticket 1 last, each on a thread of its own that has returned before
  // the next starts: every op but the first is held until ticket 1 arrives.
  for (int i = kOps - 1; i >= 1; --i) {
    std::thread([&, i] { writeWithTicket(*w, numberedOp(i + 1), tickets[i]); }).join();
  }
  EXPECT_TRUE(rows().empty());
  // The payloads are written already; only the rows wait.
  EXPECT_EQ(w->counters().tensors_written, 3u * (kOps - 1));
  std::thread([&] { writeWithTicket(*w, numberedOp(1), tickets[0]); }).join();
  EXPECT_EQ(rows(), expectedRows(1, kOps));
  EXPECT_EQ(w->counters().write_errors, 0u);
}

TEST_F(RowOrderTest, InputsRowsPrecedeOutputsRowsWhateverTheTensorOrder) {
  auto w = make(makePlan(config::SavedData::kStatistic));
  ASSERT_NE(w, nullptr);
  OwnedOp op = numberedOp(7);
  // [output0, input0, input1]
  std::rotate(op.tensors.begin(), op.tensors.begin() + 2, op.tensors.end());
  ASSERT_EQ(op.tensors[0].io, Io::kOutput);
  writeWithTicket(*w, op, w->takeRowTicket());
  EXPECT_EQ(rows(), expectedRows(7, 7));
  // Without a ticket as well.
  OwnedOp plain = numberedOp(8);
  std::rotate(plain.tensors.begin(), plain.tensors.begin() + 2, plain.tensors.end());
  ASSERT_TRUE(w->writeOp(plain.record()).has_value());
  std::vector<std::string> want = expectedRows(7, 8);
  EXPECT_EQ(rows(), want);
}

TEST_F(RowOrderTest, OutputsBetweenInputsStillFollowAllInputs) {
  auto w = make(makePlan(config::SavedData::kStatistic));
  ASSERT_NE(w, nullptr);
  OwnedOp op = numberedOp(3);
  std::swap(op.tensors[1], op.tensors[2]);  // [input0, output0, input1]
  writeWithTicket(*w, op, w->takeRowTicket());
  EXPECT_EQ(rows(), expectedRows(3, 3));
}

class EmptyTicketTest : public RowOrderTest {
 protected:
  // Ticket 2's op writes nothing (`empty`, refused by writeOp when `refused`); ticket 3 was
  // written before ticket 1: completing ticket 2 must release ticket 3's rows.
  void check(const config::DumpPlan& plan, OwnedOp empty, bool refused) {
    auto w = make(plan);
    ASSERT_NE(w, nullptr);
    const uint64_t t1 = w->takeRowTicket();
    const uint64_t t2 = w->takeRowTicket();
    const uint64_t t3 = w->takeRowTicket();
    writeWithTicket(*w, numberedOp(3), t3);
    writeWithTicket(*w, numberedOp(1), t1);
    EXPECT_EQ(rows(), expectedRows(1, 1));  // 3 waits for 2
    OpRecord r = empty.record();
    r.row_ticket = t2;
    auto result = w->writeOp(r);
    EXPECT_EQ(result.has_value(), !refused) << (result ? "" : result.error().message);
    std::vector<std::string> want = expectedRows(1, 1);
    for (auto& row : expectedRows(3, 3)) want.push_back(row);
    EXPECT_EQ(rows(), want);
    // Later tickets are not held up either.
    writeWithTicket(*w, numberedOp(4), w->takeRowTicket());
    for (auto& row : expectedRows(4, 4)) want.push_back(row);
    EXPECT_EQ(rows(), want);
  }
};

TEST_F(EmptyTicketTest, TensorFilteredByInputOutputReleasesLaterRows) {
  config::DumpPlan plan = makePlan(config::SavedData::kStatistic);
  plan.input_output = config::IoSelect::kInputs;
  OwnedOp empty;
  empty.op_name = "Default/OnlyOutput";
  empty.tensors.push_back(floatTensor(Io::kOutput, 0, {2}, {1, 2}));
  // With inputs only, the numbered ops' rows are their inputs'.
  auto w = make(plan);
  ASSERT_NE(w, nullptr);
  const uint64_t t1 = w->takeRowTicket();
  const uint64_t t2 = w->takeRowTicket();
  const uint64_t t3 = w->takeRowTicket();
  writeWithTicket(*w, numberedOp(3), t3);
  writeWithTicket(*w, numberedOp(1), t1);
  EXPECT_EQ(rows(),
            (std::vector<std::string>{"Default/Add-op1 input 0", "Default/Add-op1 input 1"}));
  writeWithTicket(*w, empty, t2);
  EXPECT_EQ(rows(),
            (std::vector<std::string>{"Default/Add-op1 input 0", "Default/Add-op1 input 1",
                                      "Default/Add-op3 input 0", "Default/Add-op3 input 1"}));
}

TEST_F(EmptyTicketTest, ZeroElementTensorReleasesLaterRows) {
  OwnedOp empty;
  empty.op_name = "Default/Empty";
  empty.tensors.push_back(floatTensor(Io::kOutput, 0, {0, 4}, {}));
  check(makePlan(config::SavedData::kStatistic), empty, /*refused=*/false);
}

TEST_F(EmptyTicketTest, RefusedMalformedTensorReleasesLaterRows) {
  OwnedOp bad;
  bad.op_name = "Default/Bad";
  // Shape [2, 3] needs 24 bytes; it has 4.
  bad.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 3}, {1}));
  check(makePlan(config::SavedData::kFull), bad, /*refused=*/true);
}

TEST_F(EmptyTicketTest, OpWithNoTensorsReleasesLaterRows) {
  OwnedOp none;
  none.op_name = "Default/NoTensors";
  check(makePlan(config::SavedData::kStatistic), none, /*refused=*/false);
}

TEST_F(RowOrderTest, NoTicketsForAJobWithoutStatistics) {
  auto w = make(makePlan(config::SavedData::kTensor));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->takeRowTicket(), 0u);
  EXPECT_EQ(w->takeRowTicket(), 0u);
  OwnedOp op = numberedOp(1);
  OpRecord r = op.record();
  r.row_ticket = w->takeRowTicket();
  auto result = w->writeOp(r);
  ASSERT_TRUE(result.has_value()) << result.error().message;
  EXPECT_EQ(result.value().tensors_written, 3u);
  EXPECT_FALSE(mem_->exists(kCsv));
}

TEST_F(RowOrderTest, TicketsCountFromOneForJobsWithStatistics) {
  for (auto saved : {config::SavedData::kStatistic, config::SavedData::kFull}) {
    auto w = make(makePlan(saved));
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->takeRowTicket(), 1u);
    EXPECT_EQ(w->takeRowTicket(), 2u);
  }
}

TEST_F(RowOrderTest, UnticketedOpsAppendAtOnceWhileTicketedOnesWait) {
  auto w = make(makePlan(config::SavedData::kStatistic));
  ASSERT_NE(w, nullptr);
  const uint64_t t1 = w->takeRowTicket();
  const uint64_t t2 = w->takeRowTicket();
  writeWithTicket(*w, numberedOp(2), t2);
  EXPECT_TRUE(rows().empty());
  OwnedOp plain = numberedOp(9);
  ASSERT_TRUE(w->writeOp(plain.record()).has_value());
  EXPECT_EQ(rows(), expectedRows(9, 9));
  writeWithTicket(*w, numberedOp(1), t1);
  std::vector<std::string> want = expectedRows(9, 9);
  for (auto& row : expectedRows(1, 2)) want.push_back(row);
  EXPECT_EQ(rows(), want);
}

TEST_F(RowOrderTest, RowsHeldPastTheirIterationsCompletionAreRefusedNotWritten) {
  // A caller that completes an iteration while rows of it wait for an earlier ticket breaks
  // completeIteration's contract; the writer must refuse those rows (never reopen a completed
  // directory), count the error, and go on writing.
  JobOptions options;
  options.max_open_directories = 1;
  auto created = JobWriter::create(mem_, makePlan(config::SavedData::kStatistic), options);
  ASSERT_TRUE(created.has_value());
  auto& w = created.value();
  OwnedOp early = numberedOp(0);
  OwnedOp late = numberedOp(1);
  late.iteration = 1;
  OpRecord first = early.record();
  first.row_ticket = w->takeRowTicket();
  OpRecord second = late.record();
  second.row_ticket = w->takeRowTicket();
  ASSERT_TRUE(w->writeOp(second));  // held for ticket 1
  ASSERT_TRUE(w->completeIteration(0, 1));
  ASSERT_TRUE(w->writeOp(first));  // releases its own rows, then refuses the held ones
  EXPECT_EQ(rows(), expectedRows(0, 0));
  EXPECT_EQ(mem_->readFile("rank_0/Net/0/1/statistic.csv").value_or(""), "");
  EXPECT_EQ(w->counters().write_errors, 1u);
  EXPECT_NE(w->counters().last_error.find("completed before all of its rows"), std::string::npos);
  OwnedOp after = numberedOp(2);
  after.iteration = 2;
  ASSERT_TRUE(w->writeOp(after.record()));
  EXPECT_NE(mem_->readFile("rank_0/Net/0/2/statistic.csv").value_or("").find("Add-op2"),
            std::string::npos);
}

}  // namespace
}  // namespace dumpd::storage
