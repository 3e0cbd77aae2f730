// Ending a DumpSession: a stop writes every record committed before it, waits for a record
// the client is inside until the deadline (a time of the session's clock, here a fake one),
// and flushes are answered once their records are written.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "tests/daemon/session_fixture.h"

namespace dumpd::daemon::testing {
namespace {

using SessionShutdownTest = SessionFixture;
using std::chrono::seconds;

// Takes the whole writer pool until open(): a session's next submission waits behind it, so
// what the client commits meanwhile stays in the ring, unread.
class PoolGate {
 public:
  explicit PoolGate(storage::WriterPool& pool) : state_(std::make_shared<State>()) {
    pool.submit(/*owner=*/UINT64_MAX, pool.capacityBytes(), [state = state_] {
      std::unique_lock lock(state->mu);
      state->cv.wait(lock, [&] { return state->open; });
    });
  }
  ~PoolGate() { open(); }
  void open() {
    std::lock_guard lock(state_->mu);
    state_->open = true;
    state_->cv.notify_all();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;  // guarded by mu
  };
  std::shared_ptr<State> state_;
};

const v1::FlushReply* flushReply(const RecordingOwner& o, uint64_t token) {
  for (const v1::Envelope& e : o.sent) {
    if (e.has_flush_reply() && e.flush_reply().token() == token) return &e.flush_reply();
  }
  return nullptr;
}

const std::string kManifest = "rank_0/.dump_metadata/manifest.jsonl";

TEST_F(SessionShutdownTest, AStopWritesEveryRecordCommittedBeforeIt) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  {
    PoolGate gate(pool_);
    for (int i = 0; i < 10; ++i) ring_.op("op" + std::to_string(i), 0, {static_cast<float>(i)});
    // The session is held at its first record: nine are still in the ring_.
    s->requestStop(clock_->now() + seconds(30));
  }
  ASSERT_TRUE(runUntil([&] { return owner_->finished; }));
  EXPECT_FALSE(owner_->error_code.has_value()) << owner_->error_message;

  const std::vector<std::string> files = filesUnder("rank_0/Net/0/0");
  ASSERT_EQ(files.size(), 11u);
  for (int i = 0; i < 10; ++i) {
    const std::string name = "Add.op" + std::to_string(i) + ".0.0." + std::to_string(i + 1) +
                             ".output.0.DefaultFormat.float32.npy";
    EXPECT_TRUE(fs_->readFile("rank_0/Net/0/0/" + name)
                    .value_or("")
                    .ends_with(floatBytes({static_cast<float>(i)})))
        << name;
  }
  const v1::Counts c = counts(*s);
  EXPECT_EQ(c.records(), 10u);
  EXPECT_EQ(c.tensors_written(), 10u);
  EXPECT_EQ(c.tensors_dropped(), 0u);
  EXPECT_NE(fs_->readFile(kManifest).value_or("").find("\"iteration\":0,\"tensors\":10,"),
            std::string::npos);
  EXPECT_TRUE(ring_.ring().closing());
  v1::SessionStatus st;
  s->fillStatus(&st);
  EXPECT_EQ(st.state(), "closed");
}

TEST_F(SessionShutdownTest, AStopWithNothingPendingClosesTheRingAndEndsQuietly) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  s->requestStop(clock_->now() + seconds(30));
  ASSERT_TRUE(runUntil([&] { return owner_->finished; }));
  EXPECT_FALSE(owner_->error_code.has_value()) << owner_->error_message;
  EXPECT_EQ(owner_->sent.size(), 1u);  // the Welcome
  EXPECT_TRUE(ring_.ring().closing());
  EXPECT_EQ(ring_.ring().tryReserve(ipc::RecordKind::kOp, 64), nullptr);
  const v1::Counts c = counts(*s);
  EXPECT_EQ(c.records(), 0u);
  EXPECT_EQ(c.tensors_written(), 0u);
  EXPECT_EQ(lastError(*s), "");
  EXPECT_TRUE(filesUnder("rank_0/Net").empty());
}

TEST_F(SessionShutdownTest, AStopWaitsForTheRecordTheClientIsInside) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  ring_.op("a", 0, {1});
  const uint64_t inside = ring_.reserveOp("b", 0, {2});
  s->requestStop(clock_->now() + seconds(30));
  // The session has set `closing`: from here it drains and waits for the open record.
  ASSERT_TRUE(runUntil([&] { return ring_.ring().closing(); }));
  clock_->advance(seconds(29));
  ring_.commit(inside);
  ASSERT_TRUE(runUntil([&] { return owner_->finished; }));
  EXPECT_EQ(counts(*s).tensors_written(), 2u);
  EXPECT_TRUE(fs_->exists("rank_0/Net/0/0/Add.b.0.0.2.output.0.DefaultFormat.float32.npy"));
  EXPECT_EQ(lastError(*s), "");
}

TEST_F(SessionShutdownTest, AClientStuckInARecordIsGivenUpOnAtTheClocksDeadline) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  ring_.op("a", 0, {1});
  ring_.reserveOp("b", 0, {2});  // never committed
  s->requestStop(clock_->now() + seconds(30));
  ASSERT_TRUE(runUntil([&] { return ring_.ring().closing(); }));
  clock_->advance(seconds(30));
  // Well under the 30 s of real time a session on the steady clock would wait.
  ASSERT_TRUE(runUntil([&] { return owner_->finished; }, seconds(10)));
  EXPECT_FALSE(owner_->error_code.has_value());
  EXPECT_EQ(lastError(*s), "gave up waiting for the client at the shutdown deadline");
  EXPECT_EQ(filesUnder("rank_0/Net/0/0"),
            (std::vector<std::string>{"Add.a.0.0.1.output.0.DefaultFormat.float32.npy",
                                      "statistic.csv"}));
  EXPECT_NE(fs_->readFile(kManifest).value_or("").find("\"iteration\":0,\"tensors\":1,"),
            std::string::npos);
}

TEST_F(SessionShutdownTest, AFlushIsAnsweredOnceItsRecordsAreWritten) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  {
    PoolGate gate(pool_);
    const uint64_t seq = ring_.op("a", 0, {1});
    ASSERT_TRUE(s->addFlushWait(seq, /*token=*/7));
    EXPECT_EQ(flushReply(*owner_, 7), nullptr) << "answered before its record was written";
  }
  ASSERT_TRUE(runUntil([&] { return flushReply(*owner_, 7) != nullptr; }));
  EXPECT_EQ(flushReply(*owner_, 7)->sequence(), 1u);
  EXPECT_EQ(flushReply(*owner_, 7)->counts().tensors_written(), 1u);

  // A flush past the last record is answered when the session ends, with what was written.
  ASSERT_TRUE(s->addFlushWait(100, /*token=*/8));
  EXPECT_EQ(flushReply(*owner_, 8), nullptr);
  s->requestStop(clock_->now() + seconds(30));
  ASSERT_TRUE(runUntil([&] { return owner_->finished; }));
  ASSERT_NE(flushReply(*owner_, 8), nullptr);
  EXPECT_EQ(flushReply(*owner_, 8)->sequence(), 1u);
  EXPECT_EQ(flushReply(*owner_, 8)->counts().tensors_written(), 1u);
}

TEST_F(SessionShutdownTest, MoreThan1024OutstandingFlushesAreRefused) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  for (uint64_t i = 0; i < 1024; ++i) ASSERT_TRUE(s->addFlushWait(1000 + i, i));
  EXPECT_FALSE(s->addFlushWait(5000, 5000));
}

}  // namespace
}  // namespace dumpd::daemon::testing
