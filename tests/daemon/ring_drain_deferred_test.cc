// RingDrain and the tensors a client keeps on its device for the flight recorder
// (PayloadKind::kDeferred): written from the bytes the client filled in, counted lost when it
// cannot, never a hang when it does not answer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/daemon/ring_drain_fixture.h"

namespace dumpd::daemon::testing {
namespace {

// Tensors a client keeps on its device for the recorder (PayloadKind::kDeferred): a
// DeferredPayload (device statistics, state), then room for the bytes.
std::string deferredPayload(const std::vector<float>& values, uint64_t state, bool fill) {
  ipc::DeferredPayload h{};
  h.stats.count = values.size();
  h.stats.max = -std::numeric_limits<double>::infinity();
  h.stats.min = std::numeric_limits<double>::infinity();
  for (float v : values) {
    if (std::isnan(v)) {
      ++h.stats.nan;
      continue;
    }
    ++(v > 0 ? h.stats.positive : v < 0 ? h.stats.negative : h.stats.zero);
    h.stats.max = std::max<double>(h.stats.max, v);
    h.stats.min = std::min<double>(h.stats.min, v);
    h.stats.sum += v;
    h.stats.sum_squares += double{v} * v;
  }
  h.state = state;
  std::string out(reinterpret_cast<const char*>(&h), sizeof h);
  return out + (fill ? floatBytes(values) : std::string(values.size() * sizeof(float), '\0'));
}

TEST_F(RingDrainTest, DeferredTensorsTheClientFilledAreWrittenFromTheirBytes) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  auto d = make(recorderConfig(R"({"saved_data": "full", "triggers": ["nan"], "after_steps": 0})"));
  ring_.step(0, 0);  // commitOne's records are of iteration 0
  commitOne("kept", 4, ipc::PayloadKind::kDeferred,
            deferredPayload({1, kNan, 3, 4}, ipc::kDeferredFilled, true));
  ring_.step(0, 1);
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["op"], "kept") << "the device statistics name the NaN";
  EXPECT_FALSE(lines[0].contains("device_tensors_lost"));
  EXPECT_EQ(d->counters().tensors_written.load(), 1u) << lastWarning(*d);
  std::string npy;
  for (const std::string& f : filesUnder(*fs_, "rank_0/Net/0/0")) {
    if (f.ends_with(".npy")) npy = fs_->readFile("rank_0/Net/0/0/" + f).value_or("");
  }
  EXPECT_TRUE(npy.ends_with(floatBytes({1, kNan, 3, 4}))) << "written from the filled bytes";
}

TEST_F(RingDrainTest, DeferredTensorsOfAClientThatCannotAnswerAreCountedLost) {
  const bool alive = false;  // gone: nothing to fetch from
  auto d = make(recorderConfig(R"({"saved_data": "full", "after_steps": 0})"),
                clientLinks(alive, std::chrono::milliseconds(30000)));
  ring_.step(0, 0);
  commitOne("kept", 2, ipc::PayloadKind::kDeferred,
            deferredPayload({1, 2}, ipc::kDeferredOnDevice, false));
  ring_.op("host", 1, {5.0f});
  ASSERT_TRUE(drainAll(*d));
  d->recorder()->triggerManually("look");
  d->finish();
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["device_tensors_lost"], 1);
  EXPECT_EQ(d->counters().tensors_failed.load(), 1u);
  EXPECT_EQ(d->counters().tensors_written.load(), 1u) << "the host tensor is written";
  for (const std::string& f : filesUnder(*fs_, "rank_0/Net/0/0")) {
    EXPECT_EQ(f.find("kept"), std::string::npos) << f;
  }
}

TEST_F(RingDrainTest, ADeferredTensorWhoseSizeDoesNotMatchItsShapeIsRefused) {
  auto d = make(recorderConfig(R"({"saved_data": "full"})"));
  ring_.step(0, 0);
  std::string payload = deferredPayload({1, 2}, ipc::kDeferredOnDevice, false);
  payload.resize(payload.size() - 4);
  commitOne("short", 2, ipc::PayloadKind::kDeferred, payload);
  EXPECT_FALSE(drainAll(*d));
  EXPECT_EQ(d->error(),
            "record 2: a tensor of short is kept on the device with 132 payload bytes, which do "
            "not match its shape and dtype");
}

// An op "mixed" of `iteration` (0): output 0 kept on the device (2 float32, on the device until
// the test says otherwise), output 1 a host float32 flagged as a dump-once source. Committed;
// returns the address of output 0's state word in the ring.
uint64_t* commitMixed(TestProducer& ring, uint32_t iteration = 0) {
  const std::vector<int64_t> two{2}, one{1};
  ipc::TensorSpec t[2];
  t[0].dtype = t[1].dtype = static_cast<uint8_t>(DType::kFloat32);
  t[0].shape = two;
  t[0].payload = ipc::PayloadKind::kDeferred;
  t[0].data_bytes = ipc::kDeferredHeaderBytes + 8;
  t[1].shape = one;
  t[1].slot = 1;
  t[1].memo = true;
  t[1].data_bytes = 4;
  ipc::OpSpec op;
  op.op_type = "Add";
  op.op_name = "mixed";
  op.iteration = iteration;
  op.tensors = std::span(t, 2);
  std::byte* body = ring.ring().tryReserve(ipc::RecordKind::kOp, ipc::opBodyBytes(op));
  EXPECT_NE(body, nullptr);
  std::vector<std::byte*> at(2);
  ipc::writeOpDescriptors(body, op, at);
  const std::string header = deferredPayload({1, 2}, ipc::kDeferredOnDevice, false);
  std::memcpy(at[0], header.data(), header.size());
  const float x = 5;
  std::memcpy(at[1], &x, 4);
  ring.ring().commit();
  return &reinterpret_cast<ipc::DeferredPayload*>(at[0])->state;
}

// A fetch the client never answers: its record is not written, and a repeat of its host
// tensor fails at once instead of waiting for a file that never comes (a writer thread, shared
// by every session, would wait for ever). A late answer gives its ring space back.
TEST_F(RingDrainTest, AnUnansweredFetchNeitherHangsARepeatNorHoldsTheRingForEver) {
  bool alive = true;
  auto d = make(recorderConfig(R"({"saved_data": "full", "after_steps": 0})"),
                clientLinks(alive, std::chrono::milliseconds(50)));
  ring_.step(0, 0);
  uint64_t* state = commitMixed(ring_);
  const ipc::SamePayload same{/*sequence=*/2, /*tensor=*/1, 0};
  const std::vector<int64_t> one{1};
  ipc::TensorSpec t;
  t.dtype = static_cast<uint8_t>(DType::kFloat32);
  t.shape = one;
  t.payload = ipc::PayloadKind::kSame;
  t.data_bytes = sizeof same;
  ipc::OpSpec op;
  op.op_type = "Add";
  op.op_name = "again";
  op.tensors = std::span(&t, 1);
  ring_.commit(ring_.reserve(op, {std::string(reinterpret_cast<const char*>(&same), sizeof same)}));
  ASSERT_TRUE(drainAll(*d));
  d->recorder()->triggerManually("look");  // returns: the repeat's writer did not wait for ever
  EXPECT_EQ(d->counters().tensors_failed.load(), 3u) << "both of mixed, and its repeat";
  EXPECT_EQ(d->counters().tensors_written.load(), 0u);
  EXPECT_EQ(d->doneSequence(), 1u) << "the unanswered record holds the ring";
  // The client answers late: the space is given back, and later fetches are waited for.
  std::atomic_ref<uint64_t>(*state).store(ipc::kDeferredLost, std::memory_order_release);
  d->recorder()->releaseAnswered();
  EXPECT_EQ(d->doneSequence(), 3u);
  alive = false;
  d->finish();
}

// After a fetch the client answered late, the next trigger asks it again (and waits): its
// device-kept tensors are written, not given up as if it were still not answering.
TEST_F(RingDrainTest, AfterALateAnswerTheNextTriggerAsksTheClientAgain) {
  // Long enough for the client thread below to answer on a loaded machine; the first
  // trigger waits that long for nothing.
  bool alive = true;
  auto d = make(recorderConfig(R"({"saved_data": "full", "after_steps": 0, "max_triggers": 0})"),
                clientLinks(alive, std::chrono::milliseconds(2000)));
  ring_.step(0, 0);
  uint64_t* first = commitMixed(ring_);
  ASSERT_TRUE(drainAll(*d));
  d->recorder()->triggerManually("unanswered");
  std::atomic_ref<uint64_t>(*first).store(ipc::kDeferredLost, std::memory_order_release);
  d->recorder()->releaseAnswered();  // the late answer

  ring_.step(0, 1);
  uint64_t* second = commitMixed(ring_, 1);
  ASSERT_TRUE(drainAll(*d));
  // The client: fills the second record once the daemon asks for it again.
  std::atomic<uint32_t>& asked = ring_.ring().control()->fetch_generation;
  const uint32_t before = asked.load();
  std::thread client([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (asked.load() == before && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (asked.load() == before) return;  // never asked: the trigger gives up on its own
    const float values[2] = {1, 2};
    auto* header = reinterpret_cast<std::byte*>(second) - offsetof(ipc::DeferredPayload, state);
    std::memcpy(header + ipc::kDeferredHeaderBytes, values, sizeof values);
    std::atomic_ref<uint64_t>(*second).store(ipc::kDeferredFilled, std::memory_order_release);
    ring_.ring().wakeConsumer();
  });
  d->recorder()->triggerManually("answered");
  client.join();
  EXPECT_NE(asked.load(), before) << "the second trigger did not ask the client";
  alive = false;
  d->finish();
  // Both tensors of the second "mixed" are written, its device-kept one from the filled bytes.
  EXPECT_EQ(d->counters().tensors_written.load(), 2u) << lastWarning(*d);
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_FALSE(lines[1].contains("device_tensors_lost")) << lines[1];
}

// Op "source" (record 2 after a step mark): one float32[2] kept on the device, {1, 2} once
// filled, flagged as a dump-once source; then op "again" (record 3): input 0 repeats it,
// output 0 is its own host float32[2] {7, 8}.
void commitSourceAndRepeat(TestProducer& ring, uint64_t state) {
  const std::vector<int64_t> two{2};
  ipc::TensorSpec t;
  t.dtype = static_cast<uint8_t>(DType::kFloat32);
  t.shape = two;
  t.io = static_cast<uint8_t>(Io::kOutput);
  t.payload = ipc::PayloadKind::kDeferred;
  t.memo = true;
  const std::string payload = deferredPayload({1, 2}, state, state == ipc::kDeferredFilled);
  t.data_bytes = payload.size();
  ipc::OpSpec op;
  op.op_type = "Add";
  op.op_name = "source";
  op.tensors = std::span(&t, 1);
  ring.commit(ring.reserve(op, {payload}));
  const ipc::SamePayload same{/*sequence=*/2, /*tensor=*/0, 0};
  ipc::TensorSpec again[2];
  again[0].dtype = again[1].dtype = static_cast<uint8_t>(DType::kFloat32);
  again[0].shape = again[1].shape = two;
  again[0].io = static_cast<uint8_t>(Io::kInput);
  again[0].payload = ipc::PayloadKind::kSame;
  again[0].data_bytes = sizeof same;
  again[1].io = static_cast<uint8_t>(Io::kOutput);
  again[1].data_bytes = 8;
  op.op_name = "again";
  op.tensors = std::span(again, 2);
  ring.commit(ring.reserve(
      op, {std::string(reinterpret_cast<const char*>(&same), sizeof same), floatBytes({7, 8})}));
}

// Dump once with tensors kept on the device: the source and its repeat, kept, then written
// by a manual trigger.
class DeferredRepeatTest : public RingDrainTest {
 protected:
  // The bytes of op `op`'s `io` file in iteration 0 ("" when there is none).
  std::string npyOf(const std::string& op, const std::string& io) const {
    for (const std::string& f : filesUnder(*fs_, "rank_0/Net/0/0")) {
      if (f.starts_with("Add." + op + ".") && f.find("." + io + ".") != std::string::npos) {
        return fs_->readFile("rank_0/Net/0/0/" + f).value_or("");
      }
    }
    return "";
  }
  std::shared_ptr<RingDrain> triggerWithSource(uint64_t state) {
    auto d = make(recorderConfig(R"({"saved_data": "full", "after_steps": 0})"));
    ring_.step(0, 0);
    commitSourceAndRepeat(ring_, state);
    EXPECT_TRUE(drainAll(*d));
    d->recorder()->triggerManually("look");
    d->finish();
    return d;
  }
};

// The repeat took no snapshot, and is written as a link to its source's file once the source
// is fetched.
TEST_F(DeferredRepeatTest, ARepeatOfAFetchedDeferredTensorLinksItsFile) {
  auto d = triggerWithSource(ipc::kDeferredFilled);
  EXPECT_EQ(d->counters().tensors_written.load(), 3u) << lastWarning(*d);
  EXPECT_EQ(d->counters().tensors_linked.load(), 1u);
  EXPECT_EQ(d->counters().tensors_failed.load(), 0u);
  const std::string source = npyOf("source", "output");
  EXPECT_TRUE(source.ends_with(floatBytes({1, 2})));
  EXPECT_EQ(npyOf("again", "input"), source);
  EXPECT_TRUE(npyOf("again", "output").ends_with(floatBytes({7, 8})));
}

// Its source never reached the host (given up for staging space): the repeat fails with it,
// and the trigger returns (a writer waiting for the source's file would wait for ever).
// ... and nothing else of the repeat's op: its own output is written (a lost snapshot must
// not take every later op of a chain with it).
TEST_F(DeferredRepeatTest, ARepeatOfALostDeferredTensorFailsWithIt) {
  auto d = triggerWithSource(ipc::kDeferredLost);
  EXPECT_EQ(d->counters().tensors_written.load(), 1u);
  EXPECT_TRUE(npyOf("again", "output").ends_with(floatBytes({7, 8})));
  EXPECT_EQ(npyOf("again", "input"), "");
  EXPECT_EQ(d->counters().tensors_failed.load(), 2u) << "the source and its repeat";
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["device_tensors_lost"], 1);
  EXPECT_NE(lastWarning(*d).find("never reached the host"), std::string::npos) << lastWarning(*d);
}

}  // namespace
}  // namespace dumpd::daemon::testing
