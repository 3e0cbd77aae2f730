// DrainRecorder on its own, without a RingDrain: records read from a ring and decoded as the
// drain decodes them are kept, checked for NaN, and written through a fake drain when a
// trigger fires; what each trigger wrote is journalled when its iterations are done.
#include "daemon/drain_recorder.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/element_count.h"
#include "config/dump_plan.h"
#include "tests/daemon/session_fixture.h"

namespace dumpd::daemon::testing {
namespace {

class DrainRecorderTest : public ::testing::Test, public RecorderOutput {
 protected:
  // A recorder for a flight_recorder `section`, its records read from ring_.
  DrainRecorder& make(const std::string& section) {
    auto plan = config::parseDumpPlan(recorderConfig(section, "full"), config::Environment{});
    EXPECT_TRUE(plan.has_value()) << plan.error().message;
    recorder_ = std::make_unique<DrainRecorder>(
        /*session_id=*/1, /*rank=*/0, *plan.value().flight_recorder, DrainRecorder::Settings{},
        DrainRecorder::Drain{*ring_, release_, counters_, warnings_, info_log_, step_, dump_once_,
                             *this});
    return *recorder_;
  }
  // Commits op `name` of `iteration` holding `values`, reads it back, and returns it decoded
  // with its slot in the release queue (in flight), as the drain hands records over.
  std::pair<std::shared_ptr<OpTask>, uint64_t> next(const std::string& name, uint32_t iteration,
                                                    const std::vector<float>& values) {
    if (!step_.started || step_.iteration != iteration) step_ = DrainStep{true, 0, iteration};
    producer_.op(name, iteration, values);
    auto r = ring_->next();
    EXPECT_TRUE(r.has_value() && r.value().has_value());
    const ipc::RingConsumer::Record& rec = *r.value();
    auto task = std::make_shared<OpTask>();
    EXPECT_TRUE(ipc::decodeOp(rec.body, rec.body_bytes, task->op).has_value());
    task->sequence = rec.sequence;
    const ipc::DecodedTensor& t = task->op.tensors[0];
    storage::TensorView v;
    v.io = static_cast<Io>(t.io);
    v.dtype = static_cast<DType>(t.dtype);
    v.shape = task->op.shape(t);
    v.data = std::span<const std::byte>(t.data, t.data_bytes);
    task->views.push_back(v);
    task->bytes = t.data_bytes;
    recorder_->sawRecord(rec.body_bytes);
    return {task, release_.push(rec.end, rec.sequence, false)};
  }
  void keep(const std::string& name, uint32_t iteration, const std::vector<float>& values) {
    auto [task, slot] = next(name, iteration, values);
    recorder_->keep(std::move(task), slot, 4096);
  }
  // The step ends as the drain ends it.
  void endStep(uint32_t iteration) {
    release_.waitIdle();
    recorder_->stepEnds(iteration);
    recorder_->stepCompleted(iteration);
  }

  // RecorderOutput: records "written" are released at once.
  void write(std::shared_ptr<OpTask> task, uint64_t slot) override {
    written_.push_back(std::to_string(task->op.iteration) + ":" + std::string(task->op.opName()));
    release_.markDone(slot);
  }
  void completeIteration(uint32_t, uint32_t iteration, const std::string& cut) override {
    completed_.push_back(iteration);
    cuts_.push_back(cut);
  }
  void journalTrigger(const std::string& line) override {
    lines_.push_back(nlohmann::json::parse(line));
  }

  TestProducer producer_;
  std::unique_ptr<ipc::RingConsumer> ring_ = std::make_unique<ipc::RingConsumer>(
      ipc::RingConsumer::attach(producer_.fd(), producer_.bytes(), 1ull << 30).value());
  ReleaseQueue release_{*ring_, nullptr};
  DrainCounters counters_;
  SessionWarnings warnings_{1};
  LogLimiter info_log_{5, std::chrono::seconds(10)};
  DrainStep step_;
  DumpOnceTable dump_once_;
  std::unique_ptr<DrainRecorder> recorder_;
  std::vector<std::string> written_;
  std::vector<uint32_t> completed_;
  std::vector<std::string> cuts_;
  std::vector<nlohmann::json> lines_;
};

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

TEST_F(DrainRecorderTest, ANanFiresAtTheStepsEndAndWritesWhatIsKeptInOrder) {
  DrainRecorder& r = make(R"({"steps": 2, "after_steps": 0, "triggers": ["nan"]})");
  keep("a", 0, {1});
  endStep(0);
  keep("a", 1, {2});
  keep("b", 1, {3});
  endStep(1);
  EXPECT_TRUE(written_.empty()) << "nothing is written before a trigger";
  keep("a", 2, {4});
  keep("b", 2, {5, kNan});
  endStep(2);
  // Steps 1 and 2 are kept (steps 2); 0 was given back.
  EXPECT_EQ(written_, (std::vector<std::string>{"1:a", "1:b", "2:a", "2:b"}));
  EXPECT_EQ(completed_, (std::vector<uint32_t>{1})) << "2 completes at its own step's end";
  ASSERT_EQ(lines_.size(), 1u) << "journalled once its last iteration is done";
  EXPECT_EQ(lines_[0]["kind"], "nan");
  EXPECT_EQ(lines_[0]["op"], "b");
  EXPECT_EQ(lines_[0]["iterations_written"], (nlohmann::json{1, 2}));
  EXPECT_FALSE(r.holdsSpace()) << "what was kept went to the writers";
  EXPECT_EQ(release_.doneSequence(), 5u);
}

TEST_F(DrainRecorderTest, AManualTriggerWritesTheIterationsAfterItAsTheyCome) {
  DrainRecorder& r = make(R"({"steps": 1, "after_steps": 1, "triggers": ["manual"]})");
  keep("a", 0, {1});
  r.triggerManually("look");
  EXPECT_EQ(written_, (std::vector<std::string>{"0:a"}));
  ASSERT_TRUE(r.writes(1));
  endStep(0);
  auto [task, slot] = next("a", 1, {2});
  r.writeAfterTrigger(std::move(task), slot);
  EXPECT_EQ(written_.back(), "1:a");
  EXPECT_TRUE(lines_.empty()) << "iteration 1 is not done yet";
  endStep(1);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0]["reason"], "look");
  EXPECT_EQ(lines_[0]["iterations_written"], (nlohmann::json{0, 1}));
  EXPECT_FALSE(r.writes(2));
}

TEST_F(DrainRecorderTest, AClientLostFiresTheCrashTriggerAndCloseJournalsWhyTheRestNeverCame) {
  DrainRecorder& r = make(R"({"steps": 2, "after_steps": 3, "triggers": ["crash"]})");
  keep("a", 4, {1});
  endStep(4);
  keep("a", 5, {2});
  r.sessionEnds(/*producer_lost=*/true);
  EXPECT_EQ(written_, (std::vector<std::string>{"4:a", "5:a"}));
  r.close("the job went away first");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0]["kind"], "crash");
  EXPECT_EQ(lines_[0]["iterations_written"], (nlohmann::json{4, 5}));
}

TEST_F(DrainRecorderTest, ARecorderTurnedOffReleasesWhatItKeeps) {
  DrainRecorder& r = make(R"({"steps": 2, "triggers": ["manual"]})");
  keep("a", 0, {1});
  keep("b", 0, {2});
  ASSERT_TRUE(r.holdsSpace());
  r.setEnabled(false);
  EXPECT_FALSE(r.holdsSpace());
  release_.waitIdle();
  EXPECT_EQ(release_.doneSequence(), 2u) << "both records went back to the ring";
  r.triggerManually("too late");
  EXPECT_TRUE(written_.empty()) << "an off recorder takes no trigger";
}

// The producer's scan from its copy (ring kCheckedBit) is taken as it is: no second read of
// the bytes. Without one the bytes are scanned here.
TEST(FindNonFinite, TakesTheProducersScanAndScansOnlyWithoutOne) {
  using Scan = storage::TensorView::Scan;
  const float nan_bytes[] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  const float inf_bytes[] = {std::numeric_limits<float>::infinity(), 2.0f};
  const float plain[] = {1.0f, 2.0f};
  static const int64_t kShape[] = {2};
  const auto view = [](const float* data, Scan scan) {
    storage::TensorView v;
    v.dtype = DType::kFloat32;
    v.shape = kShape;
    v.data = std::as_bytes(std::span<const float>(data, 2));
    v.producer_scan = scan;
    return v;
  };
  const auto run = [](std::vector<storage::TensorView> views) {
    OpTask task;
    task.views = std::move(views);
    findNonFinite(task);
    return std::make_pair(task.nan_view, task.inf_view);
  };
  // No scan: the NaN in view 1 and the inf in view 2 are found here.
  EXPECT_EQ(run({view(plain, Scan::kUnknown), view(nan_bytes, Scan::kUnknown),
                 view(inf_bytes, Scan::kUnknown)}),
            std::make_pair(1u, 2u));
  // The producer said finite: its word is taken (the NaN in the bytes is not looked for).
  EXPECT_EQ(run({view(nan_bytes, Scan::kFinite), view(inf_bytes, Scan::kFinite)}),
            std::make_pair(OpTask::kNoView, OpTask::kNoView));
  // It said non-finite: which of the two is found in the bytes; a claim the bytes do not bear
  // out names nothing.
  EXPECT_EQ(run({view(plain, Scan::kNonFinite), view(inf_bytes, Scan::kNonFinite),
                 view(nan_bytes, Scan::kNonFinite)}),
            std::make_pair(2u, 1u));
}

}  // namespace
}  // namespace dumpd::daemon::testing
