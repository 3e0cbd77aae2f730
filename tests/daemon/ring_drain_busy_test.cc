// The flight recorder on a busy node (issue 38): when the drain falls behind the producer, or
// the writer threads get no CPU, the recorder gives kept iterations back and goes on checking
// values rather than make training wait for ring space.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "daemon/ring_drain.h"
#include "tests/daemon/ring_drain_fixture.h"

namespace dumpd::daemon::testing {
namespace {

constexpr size_t kValues = 4096;  // 16 KiB a record, the 256 KiB ring holds ~15 of them

// Hands the next committed record to `d`; false when there is none (or it refused it).
bool handleOne(RingDrain& d) {
  auto r = d.ring().next();
  EXPECT_TRUE(r.has_value()) << r.error().message;
  if (!r || !r.value()) return false;
  EXPECT_TRUE(d.handle(*r.value()));
  return true;
}

TEST_F(RingDrainTest, ADrainBehindTheProducerGivesKeptIterationsBackBeforeTheProducerRunsShort) {
  auto d = make(recorderConfig(R"({"steps": 4})"));
  const std::vector<float> values(kValues, 1.0f);
  ipc::RingProducer& ring = ring_.ring();
  // The producer: two op records an iteration, each after its step mark.
  uint32_t iteration = 1;
  bool second = false;
  uint64_t record_bytes = 0;  // of one op record (the first, which needs no pad record)
  const auto produce = [&] {  // returns the records committed
    if (!second) ring_.step(0, iteration);
    const int records = second ? 1 : 2;
    const uint64_t before = ring.usedBytes();
    ring_.op(second ? "b" : "a", iteration, values);
    if (record_bytes == 0) record_bytes = ring.usedBytes() - before;
    if (second) ++iteration;
    second = !second;
    return records;
  };
  // It runs ahead of a drain that gets no CPU until the ring has room for under 8 records.
  do {
    produce();
  } while (ring.usedBytes() + 8 * record_bytes <= ring.capacity());
  // Then the producer commits a record (and its step mark) for each the drain reads.
  // Whenever the drain holds kept records, the producer has room for two of them: it never
  // waits for the recorder (the headroom rule once counted only what the drain had read, and
  // the producer ran out of room after one record).
  int committed = 1;
  for (int i = 0; i < 40; ++i) {
    for (int r = 0; r < committed; ++r) {
      ASSERT_TRUE(handleOne(*d));
      if (d->recorderHoldsSpace()) {
        ASSERT_LE(ring.usedBytes() + 2 * record_bytes, ring.capacity())
            << "cycle " << i << ", iteration " << iteration;
      }
    }
    committed = produce();
  }
  ASSERT_TRUE(drainAll(*d));
  EXPECT_GT(recorderStatus(*d).discarded_for_space(), 0u);
  EXPECT_EQ(recorderStatus(*d).producer_waits(), 0u);
  // Caught up, the recorder keeps its iterations whole again.
  for (int i = 0; i < 10; ++i) {
    produce();
    ASSERT_TRUE(drainAll(*d));
  }
  EXPECT_EQ(recorderStatus(*d).kept_iterations(), 4u);
  d->finish();
}

TEST_F(RingDrainTest, TheNanCheckDoesNotWaitForWritersThatGetNoCpu) {
  // Writers run SCHED_IDLE: on a busy node they may not run for seconds. Both are held here.
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  std::promise<void> running[2];
  for (uint64_t w = 0; w < 2; ++w) {
    pool_.submit(/*owner=*/100 + w, 1, [&, w, gate] {
      running[w].set_value();
      gate.wait();
    });
  }
  for (auto& r : running) r.get_future().wait();

  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  auto d = make(recorderConfig(R"({"steps": 2, "triggers": ["nan"], "after_steps": 0})"));
  ring_.step(0, 1);
  ring_.op("fine", 1, {1.0f});
  ring_.step(0, 2);
  ring_.op("fine", 2, {2.0f});
  ring_.op("bad", 2, {kNan});
  ring_.step(0, 3);
  // The check once ran on the writers, and every step mark waited for it. The trigger is
  // counted before its kept iterations go to the writers (which it does wait for).
  auto drained = std::async(std::launch::async, [&] { return drainAll(*d); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (recorderStatus(*d).triggers() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const v1::RecorderStatus st = recorderStatus(*d);
  go.set_value();
  EXPECT_TRUE(drained.get());
  EXPECT_EQ(st.triggers(), 1u) << "the drain waited for the writers";
  EXPECT_NE(st.last_trigger().find("bad output 0"), std::string::npos) << st.last_trigger();
  d->finish();
  const std::vector<nlohmann::json> lines = triggerLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["op"], "bad");
  EXPECT_EQ(lines[0]["iteration"], 2);
  EXPECT_EQ(lines[0]["iterations_written"], nlohmann::json({1, 2}));
}

}  // namespace
}  // namespace dumpd::daemon::testing
