// dumpctl trigger called as a function: the session selector's parsing and its errors, and
// what the command says when no daemon listens.
#include "dumpctl/trigger_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

namespace dumpd::dumpctl {
namespace {

using ::testing::HasSubstr;

// The parse error of `args`, or "" when they parse.
std::string selectorError(const std::vector<std::string_view>& args) {
  auto sel = parseSessionSelector(args);
  return sel ? std::string() : sel.error().message;
}

TEST(ParseSessionSelector, ASessionId) {
  auto sel = parseSessionSelector({"42"});
  ASSERT_TRUE(sel) << sel.error().message;
  EXPECT_EQ(sel->session_id(), 42u);
  EXPECT_EQ(sel->pid(), 0);
  EXPECT_FALSE(sel->by_rank());
}

TEST(ParseSessionSelector, APid) {
  auto sel = parseSessionSelector({"--pid", "1234"});
  ASSERT_TRUE(sel) << sel.error().message;
  EXPECT_EQ(sel->pid(), 1234);
  EXPECT_EQ(sel->session_id(), 0u);
  EXPECT_FALSE(sel->by_rank());
}

TEST(ParseSessionSelector, ARankAndAJob) {
  auto sel = parseSessionSelector({"--rank", "3", "--job", "Net"});
  ASSERT_TRUE(sel) << sel.error().message;
  EXPECT_TRUE(sel->by_rank());
  EXPECT_EQ(sel->rank(), 3u);
  EXPECT_EQ(sel->net_name(), "Net");
  // Rank 0 is a rank like any other.
  auto zero = parseSessionSelector({"--job", "Net", "--rank", "0"});
  ASSERT_TRUE(zero) << zero.error().message;
  EXPECT_TRUE(zero->by_rank());
  EXPECT_EQ(zero->rank(), 0u);
}

TEST(ParseSessionSelector, ErrorsNameTheArgument) {
  EXPECT_EQ(selectorError({}), "name the session: SESSION, --pid PID, or --rank N --job NET_NAME");
  EXPECT_EQ(selectorError({"abc"}), "'abc' is not a session id (dumpctl status shows them)");
  EXPECT_EQ(selectorError({"0"}), "'0' is not a session id (dumpctl status shows them)");
  EXPECT_EQ(selectorError({"1", "2"}), "more than one session id given");
  EXPECT_EQ(selectorError({"--pid"}), "--pid needs a process id");
  EXPECT_EQ(selectorError({"--pid", "-5"}), "--pid needs a process id");
  EXPECT_EQ(selectorError({"--pid", "12x"}), "--pid needs a process id");
  EXPECT_EQ(selectorError({"--rank", "x", "--job", "Net"}), "--rank needs a rank number");
  EXPECT_EQ(selectorError({"--rank", "1", "--job", ""}), "--job needs the job's net_name");
  EXPECT_EQ(selectorError({"--rank", "1"}), "--rank and --job go together");
  EXPECT_EQ(selectorError({"--job", "Net"}), "--rank and --job go together");
  EXPECT_EQ(selectorError({"7", "--pid", "9"}), "name the session one way only");
  EXPECT_EQ(selectorError({"--force"}), "unknown argument '--force'");
}

class TriggerCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/dumpctl_trigger_XXXXXX";
    ASSERT_NE(::mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
  }
  void TearDown() override { ::rmdir(dir_.c_str()); }

  int run(const std::vector<std::string_view>& args, const std::string& socket) {
    return runTriggerCommand(args, socket, out_, err_);
  }

  std::string dir_;
  std::ostringstream out_, err_;
};

TEST_F(TriggerCommandTest, NoDaemonListeningFailsWithExitOneAndSaysSo) {
  const std::string socket = dir_ + "/dumpd.sock";  // nothing there
  EXPECT_EQ(run({"5", "--reason", "look"}, socket), 1);
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(err_.str(), "dumpctl trigger: cannot connect to dumpd at " + socket +
                            ": No such file or directory (is the daemon running?)\n");
}

TEST_F(TriggerCommandTest, ABadSelectorIsAUsageErrorBeforeAnyConnection) {
  const std::string socket = dir_ + "/dumpd.sock";
  EXPECT_EQ(run({"--rank", "1"}, socket), 2);
  EXPECT_EQ(err_.str(), "dumpctl trigger: --rank and --job go together\n");
}

TEST_F(TriggerCommandTest, AReasonWithoutTextIsAUsageError) {
  EXPECT_EQ(run({"5", "--reason"}, dir_ + "/dumpd.sock"), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--reason needs a TEXT"));
}

}  // namespace
}  // namespace dumpd::dumpctl
