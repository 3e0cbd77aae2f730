// RingDrain and runtime control: the daemon enforces the selection it sent from the step mark
// where the client was bound to apply it, whatever the client says, and never goes back to an
// older one; device-kept tensors are refused where no fetch can be meant.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "daemon/runtime_selection.h"
#include "tests/daemon/ring_drain_fixture.h"

namespace dumpd::daemon::testing {
namespace {

class RingDrainSelectionTest : public RingDrainTest {
 protected:
  // `recorder`: a flight_recorder section (the job then records what it does not dump).
  std::shared_ptr<RingDrain> makeWithSelection(const std::string& recorder = "") {
    std::string config = jobConfig("full", "all");
    if (!recorder.empty()) {
      config.pop_back();
      config += ", \"flight_recorder\": " + recorder + "}";
    }
    Selection initial;
    initial.iteration = "all";
    selection_ = std::make_shared<RuntimeSelection>(initial, !recorder.empty());
    DrainLinks links;
    links.selection = selection_;
    return make(config, std::move(links));
  }
  // A step mark naming the generation the client says it applied, then op "a" of that
  // iteration.
  void step(uint32_t iteration, uint64_t generation) {
    v1::Control ctl;
    ctl.mutable_step()->set_iteration(iteration);
    ctl.mutable_step()->set_selection_generation(generation);
    ring_.control(ctl);
    ring_.op("a", iteration, {1.0f});
  }
  // dumpctl control --pause, sent when the client's ring stands where `d` has read to.
  void pause(RingDrain& d, bool paused = true) {
    v1::ControlChange c;
    c.set_paused(paused);
    ASSERT_TRUE(selection_->change(c, 0, 0, d.ring().committedPosition()));
  }
  // The iterations with files under rank_0/Net/0.
  std::set<std::string> iterationsWritten() const {
    std::set<std::string> out;
    for (const std::string& f : filesUnder(*fs_, "rank_0/Net/0")) {
      out.insert(f.substr(0, f.find('/')));
    }
    return out;
  }

  std::shared_ptr<RuntimeSelection> selection_;
};

TEST_F(RingDrainSelectionTest, APauseTheClientIgnoresIsEnforcedFromItsSecondStepMarkAfter) {
  auto d = makeWithSelection();
  step(0, 0);
  step(1, 0);
  ASSERT_TRUE(drainAll(*d));
  pause(*d);
  // The client may have written this step mark before the update reached it.
  step(2, 0);
  // By this one it has read its socket: bound, whatever it says.
  step(3, 0);
  step(4, 0);
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  EXPECT_EQ(iterationsWritten(), (std::set<std::string>{"0", "1", "2"}));
  // After the enforcement, each step mark that still names generation 0 is refused.
  EXPECT_NE(lastWarning(*d).find("applied selection 0, older than 1"), std::string::npos)
      << lastWarning(*d);
}

TEST_F(RingDrainSelectionTest, AClientThatAppliesThePauseAtOnceIsFollowedAtOnce) {
  auto d = makeWithSelection();
  step(0, 0);
  ASSERT_TRUE(drainAll(*d));
  pause(*d);
  step(1, 1);
  ASSERT_TRUE(drainAll(*d));
  pause(*d, false);
  step(2, 1);  // not yet: the resume was sent after the last step mark
  step(3, 2);
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  EXPECT_EQ(iterationsWritten(), (std::set<std::string>{"0", "3"}));
  EXPECT_EQ(lastWarning(*d), "");
  // control.jsonl says when each change was asked, then from which iteration it took effect.
  std::vector<nlohmann::json> asked, in_force;
  std::istringstream lines(fs_->readFile("rank_0/.dump_metadata/control.jsonl").value_or(""));
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    (j.contains("in_force_from_iteration") ? in_force : asked).push_back(j);
  }
  ASSERT_EQ(asked.size(), 2u);
  ASSERT_EQ(in_force.size(), 2u);
  // The pause: 1 is the first iteration not dumped; the resume: 3 the first dumped again.
  EXPECT_EQ(in_force[0]["generation"], 1);
  EXPECT_EQ(in_force[0]["in_force_from_iteration"], 1);
  EXPECT_EQ(in_force[0]["how"], "the client applied it");
  EXPECT_EQ(in_force[1]["generation"], 2);
  EXPECT_EQ(in_force[1]["in_force_from_iteration"], 3);
}

TEST_F(RingDrainSelectionTest, AnAcknowledgementOfAnOlderGenerationDoesNotUnpause) {
  auto d = makeWithSelection();
  step(0, 0);
  ASSERT_TRUE(drainAll(*d));
  pause(*d);
  step(1, 1);
  step(2, 0);  // back to generation 0: refused
  step(3, 0);
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  EXPECT_EQ(iterationsWritten(), (std::set<std::string>{"0"}));
  EXPECT_NE(lastWarning(*d).find("older than 1 in force"), std::string::npos) << lastWarning(*d);
}

// With a flight recorder the client sends every step (to be kept), so only the daemon's own
// check keeps a paused step from being written: paused steps are kept, not dumped.
TEST_F(RingDrainSelectionTest, PausedStepsOfAJobWithARecorderAreKeptNotWritten) {
  auto d = makeWithSelection(R"({"steps": 8, "triggers": ["manual"]})");
  step(0, 0);
  step(1, 0);
  ASSERT_TRUE(drainAll(*d));
  pause(*d);
  step(2, 1);
  step(3, 1);
  step(4, 1);
  ASSERT_TRUE(drainAll(*d));
  pause(*d, false);
  step(5, 2);
  ASSERT_TRUE(drainAll(*d));
  EXPECT_EQ(recorderStatus(*d).kept_iterations(), 3u);
  d->finish();  // waits for the writers (iteration 5's record may still be in the pool)
  EXPECT_EQ(iterationsWritten(), (std::set<std::string>{"0", "1", "5"}));
}

// A change that does not mention the pause keeps it (the generation lookup finds each one).
TEST_F(RingDrainSelectionTest, ANewIterationListKeepsThePause) {
  auto d = makeWithSelection();
  step(0, 0);
  ASSERT_TRUE(drainAll(*d));
  pause(*d);
  step(1, 1);
  v1::ControlChange c;
  c.set_iteration("0-100");
  ASSERT_TRUE(selection_->change(c, 0, 0, d->ring().committedPosition()));
  step(2, 2);
  step(3, 2);
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  EXPECT_EQ(iterationsWritten(), (std::set<std::string>{"0"}));
}

TEST_F(RingDrainSelectionTest, APauseIsEnforcedOnAClientThatSendsNoStepMark) {
  // Issue 48: ops of increasing iterations and no step mark after the pause: the old drain
  // enforced a pause only at step marks, and wrote all of them while status said paused.
  auto d = makeWithSelection();
  step(0, 0);
  ASSERT_TRUE(drainAll(*d));
  pause(*d);
  ring_.op("b", 0, {2.0f});  // the step in progress keeps its grace
  for (uint32_t i = 1; i <= 200; ++i) ring_.op("a", i, {1.0f});
  ASSERT_TRUE(drainAll(*d));
  d->finish();
  EXPECT_EQ(iterationsWritten(), (std::set<std::string>{"0"}));
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/0").size(), 3u) << "a, b and statistic.csv";
  EXPECT_NE(lastWarning(*d).find("dumpd enforces the pause from iteration 1"), std::string::npos)
      << lastWarning(*d);
}

TEST_F(RingDrainTest, ADeviceKeptTensorInAJobWithoutARecorderEndsTheSession) {
  auto d = make();
  ring_.step(0, 0);
  commitOne("kept", 2, ipc::PayloadKind::kDeferred,
            std::string(ipc::kDeferredHeaderBytes + 8, '\0'));
  EXPECT_FALSE(drainAll(*d));
  EXPECT_EQ(d->error(),
            "record 2: a tensor of kept is kept on the client's device, but the job has no "
            "flight recorder");
}

TEST_F(RingDrainTest, ADeviceKeptTensorInAnIterationTheJobDumpsEndsTheSession) {
  // The job dumps iteration 0 (recorderConfig selects only 100000, so: a selection of 0).
  std::string config = jobConfig("statistic", "0");
  config.pop_back();
  auto d = make(config + R"(, "flight_recorder": {"steps": 2}})");
  ring_.step(0, 0);
  commitOne("kept", 2, ipc::PayloadKind::kDeferred,
            std::string(ipc::kDeferredHeaderBytes + 8, '\0'));
  EXPECT_FALSE(drainAll(*d));
  EXPECT_EQ(d->error(),
            "record 2: a tensor of kept is kept on the client's device, but iteration 0 is "
            "dumped, not recorded");
}

}  // namespace
}  // namespace dumpd::daemon::testing
