// RingDrainTest: a RingDrain on its own, the test in the session thread's place (records
// handed to handle() one by one, files in a memory file system). Shared by ring_drain_test.cc
// and ring_drain_deferred_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/ring_drain.h"
#include "tests/daemon/session_fixture.h"

namespace dumpd::daemon::testing {

class RingDrainTest : public ::testing::Test {
 protected:
  // A drain of ring_ for `config`, writing into fs_.
  std::shared_ptr<RingDrain> make(const std::string& config = jobConfig(), DrainLinks links = {}) {
    auto plan = config::parseDumpPlan(config, config::Environment{});
    EXPECT_TRUE(plan.has_value()) << plan.error().message;
    auto filter = config::Filter::create(plan.value());
    auto ring = ipc::RingConsumer::attach(ring_.fd(), ring_.bytes(), 1ull << 30);
    auto writer = storage::JobWriter::create(fs_, plan.value(), storage::JobOptions{});
    return std::make_shared<RingDrain>(DrainIds{/*session=*/1, /*rank=*/0, /*device=*/0},
                                       std::move(plan.value()), std::move(filter.value()),
                                       std::move(ring.value()), fs_, std::move(writer.value()),
                                       pool_, std::move(links));
  }
  // Hands every committed record to `d`; false at the first one it refuses.
  static bool drainAll(RingDrain& d) {
    for (;;) {
      auto r = d.ring().next();
      EXPECT_TRUE(r.has_value()) << r.error().message;
      if (!r || !r.value()) return r.has_value();
      if (!d.handle(*r.value())) return false;
    }
  }
  // Commits op "Add" `name` with one float32 tensor of `elements` whose payload, of `kind`,
  // is `payload`.
  void commitOne(const std::string& name, int64_t elements, ipc::PayloadKind kind,
                 const std::string& payload) {
    const std::vector<int64_t> shape{elements};
    ipc::TensorSpec t;
    t.dtype = static_cast<uint8_t>(DType::kFloat32);
    t.shape = shape;
    t.payload = kind;
    t.data_bytes = payload.size();
    ipc::OpSpec op;
    op.op_type = "Add";
    op.op_name = name;
    op.tensors = std::span(&t, 1);
    ring_.commit(ring_.reserve(op, {payload}));
  }
  static std::string lastWarning(const RingDrain& d) {
    auto e = d.warnings().lastError();
    return e ? *e : "";
  }
  // The file of op "Add" `name`, committed as record `sequence` by ring_.op().
  static std::string npyName(const std::string& name, uint64_t sequence) {
    return "Add." + name + ".0.0." + std::to_string(sequence) +
           ".output.0.DefaultFormat.float32.npy";
  }
  // Commits the loss the client reports for `iteration`.
  void reportLoss(uint32_t iteration, double value) {
    v1::Control ctl;
    ctl.mutable_loss()->set_iteration(iteration);
    ctl.mutable_loss()->set_value(value);
    ring_.control(ctl);
  }
  // The lines of triggers.jsonl, parsed.
  std::vector<nlohmann::json> triggerLines() const { return journalLines("triggers.jsonl"); }
  // The lines of the journal .dump_metadata/`name`, parsed.
  std::vector<nlohmann::json> journalLines(const std::string& name) const {
    std::vector<nlohmann::json> out;
    const std::string text = fs_->readFile("rank_0/.dump_metadata/" + name).value_or("");
    for (size_t at = 0; at < text.size();) {
      const size_t end = text.find('\n', at);
      EXPECT_NE(end, std::string::npos) << "a line without its newline";
      if (end == std::string::npos) break;
      out.push_back(nlohmann::json::parse(text.substr(at, end - at)));
      at = end + 1;
    }
    return out;
  }
  // Links whose client is alive while `alive` is, and answers a fetch within `timeout`.
  static DrainLinks clientLinks(const bool& alive, std::chrono::milliseconds timeout) {
    DrainLinks links;
    links.recorder.device.producer_alive = [&alive] { return alive; };
    links.recorder.device.timeout = timeout;
    return links;
  }
  static v1::RecorderStatus recorderStatus(const RingDrain& d) {
    v1::RecorderStatus st;
    EXPECT_NE(d.recorder(), nullptr);
    if (d.recorder() != nullptr) d.recorder()->fillStatus(&st);
    return st;
  }

  TestProducer ring_;
  std::shared_ptr<storage::MemoryFileSystem> fs_ = std::make_shared<storage::MemoryFileSystem>();
  storage::WriterPool pool_{2, 64u << 20};
};

}  // namespace dumpd::daemon::testing
