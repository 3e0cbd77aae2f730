// A DumpSession driven without a socket or a second process: set-up and its errors, the drain
// into the memory file system, corrupt records, and the status figures read from the clock.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "tests/daemon/session_fixture.h"

namespace dumpd::daemon::testing {
namespace {

using DumpSessionTest = SessionFixture;
using std::chrono::seconds;

bool ended(const RecordingOwner& o) { return o.welcomed() || o.error_code.has_value(); }

TEST_F(DumpSessionTest, SetUpWelcomesTheClientWithTheSessionsTerms) {
  settings_.max_ring_bytes = 8u << 20;
  settings_.block_timeout_ms = 250;
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  const v1::Welcome& w = owner_->sent.front().welcome();
  EXPECT_EQ(w.session_id(), s->id());
  EXPECT_EQ(w.protocol_major(), ipc::kProtocolMajor);
  EXPECT_EQ(w.backpressure(), v1::BACKPRESSURE_BLOCK);
  EXPECT_EQ(w.dump_root(), "/dump");
  EXPECT_EQ(w.block_timeout_ms(), 250u);
  EXPECT_EQ(w.limits().max_ring_bytes(), 8u << 20);
  v1::SessionStatus st;
  s->fillStatus(&st);
  EXPECT_EQ(st.state(), "active");
  EXPECT_EQ(st.net_name(), "Net");
  EXPECT_EQ(st.path(), "/dump");
  EXPECT_EQ(st.producer(), "unit-test");
  EXPECT_EQ(st.ring_capacity_bytes(), ring_.ring().capacity());
  // The job writer opened the dump tree through the session's DumpRoots.
  EXPECT_TRUE(fs_->exists("rank_0/.dump_metadata/data_dump.json"));
}

TEST_F(DumpSessionTest, SetUpErrorsAreAnsweredWithTheirWireCode) {
  TestProducer& ring = ring_;
  const auto failure = [&](v1::Hello h) {
    auto owner = std::make_shared<RecordingOwner>();
    start(owner, std::move(h), ring);
    EXPECT_TRUE(runUntil([&] { return ended(*owner) && owner->finished; }));
    EXPECT_FALSE(owner->welcomed());
    return std::make_pair(owner->error_code.value_or(v1::Error::UNKNOWN), owner->error_message);
  };
  v1::Hello bad_config = hello(ring, "{\"common_dump_settings\": 1}");
  EXPECT_EQ(failure(bad_config).first, v1::Error::INVALID_CONFIG);

  v1::Hello wrong_size = hello(ring);
  wrong_size.set_ring_bytes(ring.bytes() + 4096);
  const auto [code, message] = failure(wrong_size);
  EXPECT_EQ(code, v1::Error::PROTOCOL);
  EXPECT_EQ(message, "ring claims " + std::to_string(ring.bytes() + 4096) +
                         " bytes but the memfd holds " + std::to_string(ring.bytes()));

  settings_.max_ring_bytes = ipc::kMinRingBytes;  // below this ring's 256 KiB
  EXPECT_EQ(failure(hello(ring)).first, v1::Error::RESOURCE_EXHAUSTED);

  settings_.max_ring_bytes = 1ull << 30;
  roots_->open_error = makeError(ErrorCode::kPermission, "open /dump: permission denied");
  EXPECT_EQ(failure(hello(ring)), std::make_pair(v1::Error::IO, roots_->open_error->message));
}

TEST_F(DumpSessionTest, ASecondLiveSessionForTheSameRootRankAndNetIsRefused) {
  auto s1 = startWelcomed();
  ASSERT_NE(s1, nullptr);
  TestProducer second_ring, third_ring;

  auto second = std::make_shared<RecordingOwner>();
  start(second, hello(second_ring), second_ring);
  ASSERT_TRUE(runUntil([&] { return ended(*second); }));
  EXPECT_EQ(second->error_code, v1::Error::CONFLICT);
  EXPECT_EQ(second->error_message,
            "another live session already dumps rank 0 of net Net into the same path");

  // The claim goes with the session that held it.
  s1->requestStop(clock_->now());
  ASSERT_TRUE(runUntil([&] { return owner_->finished; }));
  auto third = std::make_shared<RecordingOwner>();
  start(third, hello(third_ring), third_ring);
  ASSERT_TRUE(runUntil([&] { return ended(*third); }));
  EXPECT_TRUE(third->welcomed()) << third->error_message;
}

// Holds set-up inside RingSource::attach until the test opens it.
class GatedRings final : public RingSource {
 public:
  Result<ipc::RingConsumer> attach(UniqueFd ring, uint64_t claimed, uint64_t max) override {
    {
      std::unique_lock lock(mu_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait_for(lock, seconds(30), [&] { return open_; });
    }
    return defaultSessionEnv().rings->attach(std::move(ring), claimed, max);
  }
  bool waitEntered() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, seconds(30), [&] { return entered_; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;  // guarded by mu_
  bool open_ = false;     // guarded by mu_
};

TEST_F(DumpSessionTest, AStopDuringSetUpIsAnsweredShuttingDown) {
  auto gate = std::make_shared<GatedRings>();
  rings_ = gate;
  auto s = start(owner_, hello(ring_), ring_);
  ASSERT_TRUE(gate->waitEntered());
  s->requestStop(clock_->now() + seconds(30));
  gate->open();
  ASSERT_TRUE(runUntil([&] { return owner_->finished; }));
  EXPECT_FALSE(owner_->welcomed());
  EXPECT_EQ(owner_->error_code, v1::Error::SHUTTING_DOWN);
  EXPECT_EQ(owner_->error_message, "the session was closed during set-up");
}

TEST_F(DumpSessionTest, CommittedOpsBecomeNpyFilesAndStatisticRowsInRingOrder) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  ring_.op("a", 0, {1, 2, 3});
  ring_.op("b", 0, {4, 5});
  ASSERT_TRUE(runUntil([&] { return counts(*s).tensors_written() == 2; }));

  const std::string dir = "rank_0/Net/0/0";
  EXPECT_EQ(filesUnder(dir),
            (std::vector<std::string>{"Add.a.0.0.1.output.0.DefaultFormat.float32.npy",
                                      "Add.b.0.0.2.output.0.DefaultFormat.float32.npy",
                                      "statistic.csv"}));
  const std::string a =
      fs_->readFile(dir + "/Add.a.0.0.1.output.0.DefaultFormat.float32.npy").value();
  const std::string b =
      fs_->readFile(dir + "/Add.b.0.0.2.output.0.DefaultFormat.float32.npy").value();
  EXPECT_EQ(a.rfind("\x93NUMPY", 0), 0u);
  EXPECT_TRUE(a.ends_with(floatBytes({1, 2, 3})));
  EXPECT_TRUE(b.ends_with(floatBytes({4, 5})));
  const std::string csv = fs_->readFile(dir + "/statistic.csv").value();
  EXPECT_NE(csv.find("\nAdd,a,0,0,1,output,0,12,float32,\"(3)\",3,1,"), std::string::npos) << csv;
  EXPECT_LT(csv.find("\nAdd,a,"), csv.find("\nAdd,b,0,0,2,output,0,8,float32,\"(2)\",5,4,"));

  const v1::Counts c = counts(*s);
  EXPECT_EQ(c.records(), 2u);
  EXPECT_EQ(c.tensors_received(), 2u);
  EXPECT_EQ(c.bytes_written(), a.size() + b.size());
  EXPECT_EQ(c.tensors_failed(), 0u);
}

TEST_F(DumpSessionTest, AStepMarkCompletesTheIterationWhileTheSessionGoesOn) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  ring_.op("a", 0, {1});
  ring_.step(0, 1);
  const std::string manifest = "rank_0/.dump_metadata/manifest.jsonl";
  ASSERT_TRUE(runUntil([&] { return fs_->exists(manifest); }));
  EXPECT_EQ(
      fs_->readFile(manifest).value(),
      "{\"graph\":0,\"iteration\":0,\"tensors\":1,\"bytes\":" +
          std::to_string(counts(*s).bytes_written()) +
          ",\"dropped\":0,\"reasons\":[],\"whole\":true,\"writes_ok\":true,\"complete\":true}\n");
  v1::SessionStatus st;
  s->fillStatus(&st);
  EXPECT_EQ(st.iteration(), 1u);
  EXPECT_FALSE(owner_->finished);
}

TEST_F(DumpSessionTest, ARecordThatDoesNotMatchItsShapeEndsTheSessionAfterTheOnesBefore) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  ring_.op("a", 0, {1, 2});
  const uint64_t bad = ring_.reserveOp("b", 0, {3, 4, 5}, /*data_bytes=*/8);
  ring_.commit(bad);
  ring_.op("c", 0, {6});  // after the corrupt record: never read
  ASSERT_TRUE(runUntil([&] { return owner_->finished; }));

  const std::string why =
      "record 2: a tensor of b has 8 bytes, which does not match its shape "
      "and dtype";
  EXPECT_EQ(owner_->error_code, v1::Error::CORRUPT_RING);
  EXPECT_EQ(owner_->error_message, why);
  EXPECT_EQ(lastError(*s), why);
  EXPECT_EQ(filesUnder("rank_0/Net/0/0"),
            (std::vector<std::string>{"Add.a.0.0.1.output.0.DefaultFormat.float32.npy",
                                      "statistic.csv"}));
  const v1::Counts c = counts(*s);
  EXPECT_EQ(c.records(), 2u);
  EXPECT_EQ(c.tensors_written(), 1u);
  // finish() ran: the iteration of what was written is complete.
  EXPECT_NE(fs_->readFile("rank_0/.dump_metadata/manifest.jsonl")
                .value_or("")
                .find("\"iteration\":0,\"tensors\":1,"),
            std::string::npos);
}

TEST_F(DumpSessionTest, AScribbledRecordHeaderIsACorruptRing) {
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  ring_.op("a", 0, {1});
  const uint64_t position = ring_.ring().control()->head.load();
  const uint64_t seq = ring_.reserveOp("b", 0, {2});
  // The client scribbles over the header of the record it is inside.
  std::memset(ring_.ring().mappedBase() + ipc::kRingControlBytes + position, 0x5a, 8);
  ring_.commit(seq);
  ASSERT_TRUE(runUntil([&] { return owner_->finished; }));
  EXPECT_EQ(owner_->error_code, v1::Error::CORRUPT_RING);
  EXPECT_EQ(owner_->error_message,
            "corrupt ring record at position " + std::to_string(position) + ": bad magic");
  EXPECT_EQ(counts(*s).tensors_written(), 1u);
}

TEST_F(DumpSessionTest, UptimeIsTheSessionClocksTime) {
  TestProducer ring;
  auto owner = std::make_shared<RecordingOwner>();
  auto s = start(owner, hello(ring), ring);
  v1::SessionStatus st;
  s->fillStatus(&st);
  EXPECT_EQ(st.uptime_s(), 0.0);
  clock_->advance(seconds(5));
  s->fillStatus(&st);
  EXPECT_EQ(st.uptime_s(), 5.0);
}

TEST_F(DumpSessionTest, FreeSpaceIsMeasuredAtSetUpThenOncePerSecondOfTheClock) {
  fs_->setCapacity(1u << 20);
  settings_.min_free_bytes = 0;  // the default floor (1 GiB) would drop the payload
  auto s = startWelcomed();
  ASSERT_NE(s, nullptr);
  const uint64_t at_setup = (1u << 20) - fs_->usedBytes();
  EXPECT_EQ(s->disk(), std::make_pair(std::string("/dump"), at_setup));

  ring_.op("a", 0, std::vector<float>(1000, 1.0f));
  ASSERT_TRUE(runUntil([&] { return counts(*s).tensors_written() == 1; }));
  EXPECT_EQ(s->disk()->second, at_setup) << "measured again before a second had passed";
  clock_->advance(seconds(1));
  const uint64_t now_free = (1u << 20) - fs_->usedBytes();
  ASSERT_LT(now_free, at_setup);
  EXPECT_TRUE(runUntil([&] { return s->disk()->second == now_free; }));
}

}  // namespace
}  // namespace dumpd::daemon::testing
