// dumpctl status's table and JSON, from StatusReply messages built here.
#include "dumpctl/status_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dumpd::dumpctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::StatusReply withSession(const std::string& changed_by, bool changed = true) {
  v1::StatusReply r;
  r.set_version("0.2.0");
  v1::SessionStatus* s = r.add_sessions();
  s->set_id(7);
  s->set_net_name("Net");
  s->set_state("active");
  s->set_selection("100000");
  s->set_selection_changed(changed);
  s->set_selection_changed_by(changed_by);
  return r;
}

TEST(StatusCommand, ARuntimeChangeNamesWhoMadeIt) {
  const std::string by_dumpd = "dumpd (the flight recorder stopped after max_triggers)";
  EXPECT_THAT(statusToTable(withSession(by_dumpd)),
              HasSubstr("selection (changed at runtime by dumpd (the flight recorder stopped "
                        "after max_triggers)): iteration \"100000\""));
  EXPECT_THAT(statusToTable(withSession("uid 1000")),
              HasSubstr("selection (changed at runtime by uid 1000): iteration"));
  EXPECT_EQ(statusToJson(withSession(by_dumpd))["sessions"][0]["selection_changed_by"], by_dumpd);
}

TEST(StatusCommand, AnUnchangedSelectionIsNotMentioned) {
  EXPECT_THAT(statusToTable(withSession("", false)), Not(HasSubstr("changed at runtime")));
}

TEST(StatusCommand, TheStepColumnIsTheJobsStepAndHowFarBehindTheDaemonIs) {
  v1::StatusReply r = withSession("", false);
  v1::SessionStatus* s = r.mutable_sessions(0);
  s->set_graph_id(0);
  s->set_iteration(17);
  s->set_job_iteration(20);
  EXPECT_THAT(statusToTable(r), HasSubstr(" 20 (-3) "));
  EXPECT_EQ(statusToJson(r)["sessions"][0]["job_iteration"], 20);
  s->set_job_iteration(17);  // caught up
  EXPECT_THAT(statusToTable(r), HasSubstr(" 17 "));
  EXPECT_THAT(statusToTable(r), Not(HasSubstr("(-")));
  s->clear_job_iteration();  // a client that does not say: the daemon's own step
  EXPECT_THAT(statusToTable(r), HasSubstr(" 17 "));
  EXPECT_FALSE(statusToJson(r)["sessions"][0].contains("job_iteration"));
}

}  // namespace
}  // namespace dumpd::dumpctl
