// dumpctl control called as a function against a fake daemon (a socket the test listens on):
// what it sends for each option, what it prints, and what it refuses before connecting.
#include "dumpctl/control_command.h"
#include "dumpctl/session_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "ipc/socket_io.h"

namespace dumpd::dumpctl {
namespace {

using ::testing::HasSubstr;

// Listens on a socket in a fresh directory and answers one session command with `reply`,
// keeping what it received.
class FakeDaemon {
 public:
  FakeDaemon() {
    char dir_template[] = "/tmp/dumpctl_control_XXXXXX";
    EXPECT_NE(::mkdtemp(dir_template), nullptr);
    dir_ = dir_template;
    path_ = dir_ + "/dumpd.sock";
    listener_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listener_.get(), 1), 0);
  }
  ~FakeDaemon() {
    if (thread_.joinable()) thread_.join();
    ::unlink(path_.c_str());
    ::rmdir(dir_.c_str());
  }
  // Answers the next connection's one request with `reply`.
  void answer(v1::Envelope reply) {
    thread_ = std::thread([this, reply = std::move(reply)] {
      UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (conn.get() < 0) return;
      ipc::FrameDecoder decoder;
      auto req = ipc::recvFrame(conn.get(), decoder, 10000);
      if (req) received_ = req.value();
      (void)ipc::sendFrame(conn.get(), reply);
    });
  }
  // What the command sent (joins the answering thread).
  std::optional<v1::Envelope> received() {
    if (thread_.joinable()) thread_.join();
    return received_;
  }
  const std::string& path() const { return path_; }
  // Whether a connection waits to be accepted (non-blocking look).
  bool connectionPending() {
    pollfd p{listener_.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

 private:
  std::string dir_, path_;
  UniqueFd listener_;
  std::thread thread_;
  std::optional<v1::Envelope> received_;
};

v1::Envelope replyWith(const std::string& message) {
  v1::Envelope e;
  e.mutable_session_command_reply()->set_session_id(3);
  e.mutable_session_command_reply()->set_message(message);
  return e;
}

class ControlCommandTest : public ::testing::Test {
 protected:
  int run(const std::vector<std::string_view>& args) {
    return runControlCommand(args, daemon_.path(), out_, err_);
  }
  // The ControlChange the command sent to session 3.
  v1::ControlChange sent() {
    auto env = daemon_.received();
    EXPECT_TRUE(env.has_value()) << "nothing was sent";
    if (!env) return {};
    EXPECT_TRUE(env->has_session_command());
    EXPECT_EQ(env->session_command().target().session_id(), 3u);
    return env->session_command().control();
  }

  FakeDaemon daemon_;
  std::ostringstream out_, err_;
};

TEST_F(ControlCommandTest, AnIterationAndAPauseTravelTogetherAndTheReplyIsPrinted) {
  daemon_.answer(replyWith("session 3: iteration \"10-14\", paused from the client's next step"));
  EXPECT_EQ(run({"3", "--iteration", "10-14", "--pause"}), 0) << err_.str();
  const v1::ControlChange c = sent();
  ASSERT_TRUE(c.has_iteration());
  EXPECT_EQ(c.iteration(), "10-14");
  ASSERT_TRUE(c.has_paused());
  EXPECT_TRUE(c.paused());
  EXPECT_FALSE(c.has_recorder_on());
  EXPECT_EQ(out_.str(), "session 3: iteration \"10-14\", paused from the client's next step\n");
}

TEST_F(ControlCommandTest, ResumeSendsOnlyThePauseSoTheRestIsKept) {
  daemon_.answer(replyWith("ok"));
  EXPECT_EQ(run({"3", "--resume"}), 0) << err_.str();
  const v1::ControlChange c = sent();
  ASSERT_TRUE(c.has_paused());
  EXPECT_FALSE(c.paused());
  EXPECT_FALSE(c.has_iteration());
  EXPECT_FALSE(c.has_recorder_on());
}

TEST_F(ControlCommandTest, TheRecorderIsTurnedOffOrOn) {
  daemon_.answer(replyWith("ok"));
  EXPECT_EQ(run({"3", "--recorder", "off"}), 0) << err_.str();
  const v1::ControlChange c = sent();
  ASSERT_TRUE(c.has_recorder_on());
  EXPECT_FALSE(c.recorder_on());
  EXPECT_FALSE(c.has_paused());
}

TEST_F(ControlCommandTest, TheReplicaPeriodTravelsAlone) {
  daemon_.answer(replyWith("ok"));
  EXPECT_EQ(run({"3", "--replica-every", "25"}), 0) << err_.str();
  const v1::ControlChange c = sent();
  ASSERT_TRUE(c.has_replica_every());
  EXPECT_EQ(c.replica_every(), 25u);
  EXPECT_FALSE(c.has_paused());
  EXPECT_FALSE(c.has_iteration());
}

TEST_F(ControlCommandTest, TheDaemonsRefusalIsPrintedWithExitOne) {
  v1::Envelope refusal;
  refusal.mutable_error()->set_message("session 3 is not yours");
  daemon_.answer(refusal);
  EXPECT_EQ(run({"3", "--pause"}), 1);
  EXPECT_EQ(err_.str(), "dumpctl control: session 3 is not yours\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(ControlCommandTest, BadArgumentsAreRefusedBeforeAnyConnection) {
  EXPECT_EQ(run({"3", "--iteration", "5-3"}), 1);  // the error dumpctl validate gives
  EXPECT_THAT(err_.str(), HasSubstr("5-3"));
  err_.str("");
  EXPECT_EQ(run({"3"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("nothing to change"));
  err_.str("");
  EXPECT_EQ(run({"3", "--pause", "--resume"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("give one of --pause and --resume"));
  err_.str("");
  EXPECT_EQ(run({"3", "--recorder", "maybe"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--recorder needs on or off"));
  err_.str("");
  for (const char* bad : {"0", "-1", "5x", "99999999999"}) {
    EXPECT_EQ(run({"3", "--replica-every", bad}), 2) << bad;
    EXPECT_THAT(err_.str(), HasSubstr("--replica-every needs a number of optimizer steps"));
    err_.str("");
  }
  EXPECT_EQ(run({"3", "--replica-every"}), 2);
  err_.str("");
  // An unknown option is named, with the nearest known one, whatever else is on the line.
  EXPECT_EQ(run({"19", "--iterations", "10-14"}), 2);
  EXPECT_EQ(err_.str(),
            "dumpctl control: unknown argument '--iterations' (did you mean --iteration?)\n");
  err_.str("");
  EXPECT_EQ(run({"19", "--pause", "--recoder", "off"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("unknown argument '--recoder' (did you mean --recorder?)"));
  err_.str("");
  EXPECT_EQ(run({"19", "--frobnicate"}), 2);
  EXPECT_EQ(err_.str(), "dumpctl control: unknown argument '--frobnicate'\n");
  EXPECT_FALSE(daemon_.connectionPending()) << "nothing may reach the daemon";
}

TEST(NearestOption, FindsTyposPluralsAndMissingDashesOnly) {
  const std::vector<std::string_view> known = {"--iteration", "--pause", "--resume", "--pid"};
  EXPECT_EQ(nearestOption("--iterations", known), "--iteration");
  EXPECT_EQ(nearestOption("-pause", known), "--pause");
  EXPECT_EQ(nearestOption("--resum", known), "--resume");
  EXPECT_EQ(nearestOption("--verbose", known), "");
  EXPECT_EQ(nearestOption("--x", known), "");
}

}  // namespace
}  // namespace dumpd::dumpctl
