// A dump session's world in one test process: a fake clock, a memory file system behind the
// session's DumpRoots, a ring made by ipc::RingProducer and filled the way the client fills
// it, the writer pool, and an owner that records what the session says. The test thread runs
// the io_context, so it is the io thread of everything it drives.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "daemon/dump_session.h"
#include "ipc/frame.h"
#include "ipc/op_codec.h"
#include "storage/fs/memory_file_system.h"
#include "tests/daemon/fake_clock.h"

namespace dumpd::daemon::testing {

// Every dump root is the one memory file system; its identity is what the test sets, and
// opening it fails with `open_error` when set. Set both before sessions start.
class MemoryRoots final : public DumpRoots {
 public:
  explicit MemoryRoots(std::shared_ptr<storage::MemoryFileSystem> fs) : fs_(std::move(fs)) {}
  Result<std::string> identify(const UniqueFd&) override { return identity; }
  Result<std::shared_ptr<storage::FileSystem>> open(UniqueFd, const PeerIdentity&) override {
    if (open_error) return *open_error;
    return std::shared_ptr<storage::FileSystem>(fs_);
  }
  std::string identity = "memory:1";
  std::optional<Error> open_error;

 private:
  const std::shared_ptr<storage::MemoryFileSystem> fs_;
};

// What a session told its connection (io thread only: the test's).
class RecordingOwner final : public SessionOwner {
 public:
  void send(const v1::Envelope& env) override { sent.push_back(env); }
  void sendErrorAndClose(v1::Error::Code code, const std::string& message) override {
    error_code = code;
    error_message = message;
  }
  void sessionFinished() override { finished = true; }

  bool welcomed() const { return !sent.empty() && sent.front().has_welcome(); }

  std::vector<v1::Envelope> sent;
  std::optional<v1::Error::Code> error_code;
  std::string error_message;
  bool finished = false;
};

// The bytes of `values` as a little-endian float32 payload (the tail of their .npy file).
inline std::string floatBytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// A client's side of the ring: records written with ipc's writer API, as the client does.
class TestProducer {
 public:
  explicit TestProducer(uint64_t capacity = 256u << 10)
      : ring_(ipc::RingProducer::create(capacity).value()) {}

  // What the client passes in its Hello.
  UniqueFd fd() const { return UniqueFd(::fcntl(ring_.memfd(), F_DUPFD_CLOEXEC, 0)); }
  uint64_t bytes() const { return ring_.mappedBytes(); }
  ipc::RingProducer& ring() { return ring_; }

  // Reserves a record for `op` and copies payloads[i] into tensor i's payload (cut to its
  // data_bytes; the rest stays zero). The record stays open (the client is inside it) until
  // commit(). Returns its sequence, 0 when the ring refused it.
  uint64_t reserve(const ipc::OpSpec& op, const std::vector<std::string>& payloads) {
    EXPECT_TRUE(ipc::checkOpSpec(op).has_value());
    std::byte* body = ring_.tryReserve(ipc::RecordKind::kOp, ipc::opBodyBytes(op));
    EXPECT_NE(body, nullptr) << "the ring is full or closing";
    if (body == nullptr) return 0;
    std::vector<std::byte*> at(op.tensors.size());
    ipc::writeOpDescriptors(body, op, at);
    for (size_t i = 0; i < at.size() && i < payloads.size(); ++i) {
      std::memcpy(at[i], payloads[i].data(),
                  std::min<uint64_t>(payloads[i].size(), op.tensors[i].data_bytes));
    }
    return ring_.reservedSequence();
  }
  // An op "Add" `name` of graph 0 with one float32 output holding `values`, its timestamp its
  // sequence (file names are predictable). `data_bytes` other than the values' size makes a
  // record the daemon must refuse.
  uint64_t reserveOp(const std::string& name, uint32_t iteration, const std::vector<float>& values,
                     std::optional<uint64_t> data_bytes = std::nullopt) {
    const std::vector<int64_t> shape{static_cast<int64_t>(values.size())};
    ipc::TensorSpec t;
    t.io = 1;
    t.dtype = static_cast<uint8_t>(DType::kFloat32);
    t.shape = shape;
    t.timestamp_us = ring_.reservedSequence() + 1;
    t.data_bytes = data_bytes.value_or(values.size() * sizeof(float));
    ipc::OpSpec op;
    op.iteration = iteration;
    op.op_type = "Add";
    op.op_name = name;
    op.tensors = std::span(&t, 1);
    return reserve(op, {floatBytes(values)});
  }
  void commit(uint64_t sequence) { ring_.commit(sequence); }
  uint64_t op(const std::string& name, uint32_t iteration, const std::vector<float>& values) {
    const uint64_t seq = reserveOp(name, iteration, values);
    commit(seq);
    return seq;
  }
  // A control record as the client writes it: the message's length, 4 zero bytes, the
  // message, then `payload` at the next 8-byte boundary. Committed.
  void control(const v1::Control& ctl, std::string_view payload = {}) {
    const std::string msg = ctl.SerializeAsString();
    const uint64_t payload_off = ipc::alignUp(8 + msg.size(), 8);
    std::byte* body = ring_.tryReserve(ipc::RecordKind::kControl, payload_off + payload.size());
    ASSERT_NE(body, nullptr);
    const auto len = static_cast<uint32_t>(msg.size());
    std::memcpy(body, &len, 4);
    std::memset(body + 4, 0, 4);
    std::memcpy(body + 8, msg.data(), msg.size());
    if (!payload.empty()) std::memcpy(body + payload_off, payload.data(), payload.size());
    ring_.commit();
  }
  // A step mark, as Client::setStep sends it.
  void step(uint32_t graph, uint32_t iteration) {
    v1::Control ctl;
    ctl.mutable_step()->set_graph_id(graph);
    ctl.mutable_step()->set_iteration(iteration);
    control(ctl);
  }

 private:
  ipc::RingProducer ring_;
};

// Regular files beneath `dir`, relative to it, sorted.
inline std::vector<std::string> filesUnder(const storage::MemoryFileSystem& fs,
                                           const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs.list()) {
    if (e.kind == storage::MemoryFileSystem::Entry::Kind::kFile &&
        e.path.rfind(dir + "/", 0) == 0) {
      out.push_back(e.path.substr(dir.size() + 1));
    }
  }
  return out;
}

inline std::string jobConfig(const std::string& saved_data = "full",
                             const std::string& iteration = "all") {
  return R"({"common_dump_settings": {"dump_mode": 0, "path": "/dump", "net_name": "Net",
    "iteration": ")" +
         iteration + R"(", "saved_data": ")" + saved_data +
         R"(", "input_output": 0, "kernels": [], "support_device": [0]},
    "e2e_dump_settings": {"enable": true, "trans_flag": true}})";
}

// A job config whose `iteration` selects nothing the tests reach (every step is only recorded)
// with the "flight_recorder" section `section` (JSON text).
inline std::string recorderConfig(const std::string& section,
                                  const std::string& saved_data = "statistic") {
  std::string c = jobConfig(saved_data, "none");
  c.pop_back();  // the closing brace
  return c + ", \"flight_recorder\": " + section + "}";
}

// The Hello of a client of `ring` (its descriptors travel beside it).
inline v1::Hello makeHello(const TestProducer& ring, const std::string& config = jobConfig()) {
  v1::Hello h;
  h.set_protocol_major(ipc::kProtocolMajor);
  h.set_job_config(config);
  h.set_producer_name("unit-test");
  h.set_ring_bytes(ring.bytes());
  return h;
}

class SessionFixture : public ::testing::Test {
 protected:
  SessionFixture() { settings_.workers_idle_priority = false; }

  void TearDown() override {
    // Sessions still running are stopped with a deadline already passed.
    for (auto& s : sessions_) s->requestStop(clock_->now());
    EXPECT_TRUE(runUntil([&] {
      for (auto& s : sessions_) {
        if (!s->finished()) return false;
      }
      return true;
    }));
  }

  SessionContext context() {
    return SessionContext{io_, pool_, claims_, settings_, SessionEnv{clock_, roots_, rings_}};
  }

  v1::Hello hello(const TestProducer& ring, const std::string& config = jobConfig()) const {
    return makeHello(ring, config);
  }

  std::shared_ptr<DumpSession> start(const std::shared_ptr<RecordingOwner>& owner, v1::Hello hello,
                                     const TestProducer& ring) {
    auto s = std::make_shared<DumpSession>(context(), owner, next_id_++, PeerIdentity{},
                                           std::move(hello), ring.fd(), UniqueFd());
    sessions_.push_back(s);
    s->start();
    return s;
  }

  // A session for jobConfig() on ring_, reporting to owner_, once it has welcomed the
  // client; null (a failure recorded) when it did not.
  std::shared_ptr<DumpSession> startWelcomed() {
    auto s = start(owner_, hello(ring_), ring_);
    runUntil([&] { return owner_->welcomed() || owner_->error_code.has_value(); });
    if (owner_->welcomed()) return s;
    ADD_FAILURE() << "no Welcome: " << owner_->error_message;
    return nullptr;
  }

  // Runs the io_context until `done` holds; false when it does not within `limit`.
  bool runUntil(const std::function<bool()>& done,
                std::chrono::seconds limit = std::chrono::seconds(30)) {
    const auto give_up = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= give_up) return false;
      io_.run_one_for(std::chrono::milliseconds(2));
    }
    return true;
  }

  v1::Counts counts(const DumpSession& s) const {
    v1::Counts c;
    s.addTotals(&c);
    return c;
  }
  std::string lastError(const DumpSession& s) const {
    v1::SessionStatus st;
    s.fillStatus(&st);
    return st.last_error();
  }

  std::vector<std::string> filesUnder(const std::string& dir) const {
    return testing::filesUnder(*fs_, dir);
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<storage::MemoryFileSystem> fs_ = std::make_shared<storage::MemoryFileSystem>();
  std::shared_ptr<MemoryRoots> roots_ = std::make_shared<MemoryRoots>(fs_);
  std::shared_ptr<RingSource> rings_ = defaultSessionEnv().rings;
  DaemonSettings settings_;
  ClaimRegistry claims_;
  storage::WriterPool pool_{2, 64u << 20};
  std::vector<std::shared_ptr<DumpSession>> sessions_;
  TestProducer ring_;  // the client of startWelcomed()
  std::shared_ptr<RecordingOwner> owner_ = std::make_shared<RecordingOwner>();
  uint64_t next_id_ = 1;
};

}  // namespace dumpd::daemon::testing
