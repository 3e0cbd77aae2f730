// The server and its connections driven over socketpairs (Server::serve), no socket path and
// no second process: the test thread is the client, the server's io_context runs on a thread
// of its own, time is a fake clock and the dump root a memory file system.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <future>
#include <thread>

#include "daemon/connection.h"
#include "daemon/server.h"
#include "ipc/socket_io.h"
#include "tests/daemon/session_fixture.h"

namespace dumpd::daemon::testing {
namespace {

using std::chrono::seconds;
constexpr int kReplyTimeoutMs = 30000;

// One client connection: blocking reads with a deadline, as a client library does.
struct TestClient {
  UniqueFd fd;
  ipc::FrameDecoder decoder;

  void send(const v1::Envelope& env, std::span<const int> fds = {}) {
    ASSERT_TRUE(ipc::sendFrame(fd.get(), env, fds).has_value());
  }
  v1::Envelope receive() {
    auto env = ipc::recvFrame(fd.get(), decoder, kReplyTimeoutMs);
    EXPECT_TRUE(env.has_value()) << env.error().message;
    return env ? env.value() : v1::Envelope();
  }
  // The next thing from the daemon is the end of the connection.
  bool closedByDaemon() {
    auto env = ipc::recvFrame(fd.get(), decoder, kReplyTimeoutMs);
    return !env && env.error().message == "dumpd closed the connection";
  }
};

class ConnectionTest : public ::testing::Test {
 protected:
  ConnectionTest() { settings_.workers_idle_priority = false; }

  ~ConnectionTest() override {
    if (!io_done_.valid()) return;
    // Whatever the test left open drains; the clock passes every deadline and the grace.
    asio::post(io_, [this] { server_->shutdown([this] { io_.stop(); }); });
    clock_->advance(std::chrono::milliseconds(settings_.shutdown_timeout_ms) +
                    Server::kShutdownGrace + seconds(1));
    EXPECT_EQ(io_done_.wait_for(seconds(30)), std::future_status::ready);
  }

  void startServer() {
    server_ = std::make_unique<Server>(io_, settings_, "",
                                       SessionEnv{clock_, roots_, defaultSessionEnv().rings});
    io_done_ = std::async(std::launch::async, [this] { io_.run(); });
  }

  // A connected socketpair: the server serves one end, the test holds the other.
  // `server_sndbuf`: the server end's send buffer (0: the default), small to make the
  // daemon's replies queue while the test does not read.
  TestClient connect(int server_sndbuf = 0) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    if (server_sndbuf != 0) {
      EXPECT_EQ(::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &server_sndbuf, sizeof server_sndbuf),
                0);
    }
    asio::post(io_, [this, fd = sv[0]] {
      asio::local::stream_protocol::socket socket(io_);
      socket.assign(asio::local::stream_protocol(), fd);
      server_->serve(std::move(socket));
    });
    return TestClient{UniqueFd(sv[1]), ipc::FrameDecoder()};
  }

  static v1::Envelope hello(const TestProducer& ring) {
    v1::Envelope env;
    *env.mutable_hello() = makeHello(ring);
    return env;
  }
  // A Hello with its two descriptors: the ring, and a root the memory roots ignore.
  void sendHello(TestClient& c, const TestProducer& ring) {
    UniqueFd ring_fd = ring.fd();
    UniqueFd root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    const int fds[] = {ring_fd.get(), root.get()};
    c.send(hello(ring), fds);
  }

  v1::StatusReply status() {
    TestClient c = connect();
    v1::Envelope req;
    req.mutable_status_request();
    c.send(req);
    return c.receive().status_reply();
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<storage::MemoryFileSystem> fs_ = std::make_shared<storage::MemoryFileSystem>();
  std::shared_ptr<MemoryRoots> roots_ = std::make_shared<MemoryRoots>(fs_);
  DaemonSettings settings_;
  std::unique_ptr<Server> server_;
  std::future<void> io_done_;
};

TEST_F(ConnectionTest, AStatusRequestIsAnsweredWithTheServersClock) {
  startServer();
  v1::StatusReply first = status();
  EXPECT_EQ(first.version(), kVersion);
  EXPECT_EQ(first.connections(), 1u);
  EXPECT_EQ(first.sessions_total(), 0u);
  EXPECT_EQ(first.uptime_s(), 0.0);
  clock_->advance(seconds(3));
  EXPECT_EQ(status().uptime_s(), 3.0);
}

TEST_F(ConnectionTest, AHelloOpensASessionWhoseRecordsAreFlushedWrittenAndCounted) {
  startServer();
  TestProducer ring;
  TestClient c = connect();
  sendHello(c, ring);
  const v1::Envelope welcome = c.receive();
  ASSERT_TRUE(welcome.has_welcome()) << welcome.error().message();
  EXPECT_EQ(welcome.welcome().dump_root(), "/dump");

  ring.op("a", 0, {1, 2});
  const uint64_t last = ring.op("b", 0, {3});
  v1::Envelope flush;
  flush.mutable_flush()->set_sequence(last);
  flush.mutable_flush()->set_token(9);
  c.send(flush);
  const v1::Envelope reply = c.receive();
  ASSERT_TRUE(reply.has_flush_reply());
  EXPECT_EQ(reply.flush_reply().token(), 9u);
  EXPECT_EQ(reply.flush_reply().sequence(), last);
  EXPECT_EQ(reply.flush_reply().counts().tensors_written(), 2u);
  EXPECT_TRUE(fs_->readFile("rank_0/Net/0/0/Add.b.0.0.2.output.0.DefaultFormat.float32.npy")
                  .value_or("")
                  .ends_with(floatBytes({3})));

  // Goodbye: the daemon closes once the session has finished (its manifest line written).
  v1::Envelope bye;
  bye.mutable_goodbye();
  c.send(bye);
  EXPECT_TRUE(c.closedByDaemon());
  EXPECT_TRUE(fs_->exists("rank_0/.dump_metadata/manifest.jsonl"));
  const v1::StatusReply after = status();
  EXPECT_EQ(after.sessions_total(), 1u);
  EXPECT_EQ(after.totals().tensors_written(), 2u);
  EXPECT_EQ(after.sessions_size(), 0);
}

TEST_F(ConnectionTest, AConnectionWithoutAHelloTimesOutOnTheClock) {
  startServer();
  TestClient c = connect();
  // The handshake timer is armed once the server has taken the connection.
  const auto give_up = std::chrono::steady_clock::now() + seconds(30);
  while (clock_->armedTimers() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  ASSERT_EQ(clock_->armedTimers(), 1u);
  clock_->advance(std::chrono::milliseconds(settings_.handshake_timeout_ms));
  const v1::Envelope e = c.receive();
  EXPECT_EQ(e.error().code(), v1::Error::TIMEOUT);
  EXPECT_EQ(e.error().message(), "no Hello or request within 10000 ms (handshake_timeout_ms)");
  EXPECT_TRUE(c.closedByDaemon());
}

TEST_F(ConnectionTest, FramesOutOfOrderAreProtocolErrors) {
  startServer();
  TestClient early = connect();
  v1::Envelope flush;
  flush.mutable_flush()->set_sequence(1);
  early.send(flush);
  const v1::Envelope e = early.receive();
  EXPECT_EQ(e.error().code(), v1::Error::PROTOCOL);
  EXPECT_EQ(e.error().message(), "Flush before Hello");
  EXPECT_TRUE(early.closedByDaemon());

  TestProducer ring;
  TestClient twice = connect();
  sendHello(twice, ring);
  ASSERT_TRUE(twice.receive().has_welcome());
  twice.send(hello(ring));
  const v1::Envelope second = twice.receive();
  EXPECT_EQ(second.error().code(), v1::Error::PROTOCOL);
  EXPECT_EQ(second.error().message(), "second Hello on one connection");
  EXPECT_TRUE(twice.closedByDaemon());
}

TEST_F(ConnectionTest, AConnectionOverTheLimitIsRefused) {
  settings_.max_connections = 1;
  startServer();
  TestProducer ring;
  TestClient first = connect();
  sendHello(first, ring);
  ASSERT_TRUE(first.receive().has_welcome());
  TestClient second = connect();
  const v1::Envelope e = second.receive();
  EXPECT_EQ(e.error().code(), v1::Error::RESOURCE_EXHAUSTED);
  EXPECT_EQ(e.error().message(),
            "connection limit reached (1 connections, max_connections in the daemon settings)");
  EXPECT_TRUE(second.closedByDaemon());
}

TEST_F(ConnectionTest, ShutdownDrainsEverySessionThenStopsTheIoContext) {
  startServer();
  TestProducer ring;
  TestClient c = connect();
  sendHello(c, ring);
  ASSERT_TRUE(c.receive().has_welcome());
  for (int i = 0; i < 5; ++i) ring.op("op" + std::to_string(i), 0, {static_cast<float>(i)});
  const uint64_t inside = ring.reserveOp("last", 0, {5});

  bool gave_up = false;  // io thread only
  asio::post(io_, [&] { server_->shutdown([&] { gave_up = true; }); });
  // The session closes the ring and waits, until shutdown_timeout_ms of the clock, for the
  // record the client is inside.
  const auto give_up = std::chrono::steady_clock::now() + seconds(30);
  while (!ring.ring().closing() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  ASSERT_TRUE(ring.ring().closing());
  ring.commit(inside);
  ASSERT_EQ(io_done_.wait_for(seconds(30)), std::future_status::ready);
  io_done_.get();
  EXPECT_FALSE(gave_up);
  EXPECT_EQ(filesUnder(*fs_, "rank_0/Net/0/0").size(), 7u);  // six tensors, statistic.csv
  EXPECT_TRUE(fs_->exists("rank_0/Net/0/0/Add.last.0.0.6.output.0.DefaultFormat.float32.npy"));
  EXPECT_TRUE(c.closedByDaemon());
}

// dumpctl control on a session whose client does not read its socket: a newer selection
// update replaces the one waiting, so at most one queues, and the client gets the newest.
TEST_F(ConnectionTest, SelectionUpdatesForAClientThatDoesNotReadReplaceEachOther) {
  startServer();
  TestProducer ring;
  TestClient c = connect(/*server_sndbuf=*/4096);
  sendHello(c, ring);
  const v1::Envelope welcome = c.receive();
  ASSERT_TRUE(welcome.has_welcome());
  std::string list;  // ~23 KB: several fill the socket's buffer
  for (int i = 0; i < 4000; ++i) list += (i ? "|" : "") + std::to_string(2 * i);
  constexpr int kChanges = 40;
  for (int i = 1; i <= kChanges; ++i) {
    TestClient op = connect();
    v1::Envelope cmd;
    v1::SessionCommand* sc = cmd.mutable_session_command();
    sc->mutable_target()->set_session_id(welcome.welcome().session_id());
    sc->mutable_control()->set_iteration(list + "|" + std::to_string(100000 + i));
    op.send(cmd);
    const v1::Envelope reply = op.receive();
    ASSERT_TRUE(reply.has_session_command_reply()) << reply.error().message();
  }
  // Now read everything queued: a few updates at most, the newest last.
  std::vector<uint64_t> generations;
  for (;;) {
    auto env = ipc::recvFrame(c.fd.get(), c.decoder, 500);
    if (!env) break;
    ASSERT_TRUE(env.value().has_selection_update());
    generations.push_back(env.value().selection_update().generation());
  }
  ASSERT_FALSE(generations.empty());
  EXPECT_EQ(generations.back(), static_cast<uint64_t>(kChanges));
  EXPECT_LE(generations.size(), 6u) << "updates queued instead of replacing each other";
}

}  // namespace
}  // namespace dumpd::daemon::testing
