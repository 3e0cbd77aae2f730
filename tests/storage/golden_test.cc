// Golden trees: the cases of tests/storage/golden/cases.json written through dumpd's writer
// must give, byte for byte, the statistic.csv of each MindSpore generation and the .npy files
// that tests/storage/golden/make_golden.py (an implementation of MindSpore's rules apart from
// dumpd's) wrote. The daemon's path is covered by tests/integration/test_golden.py.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "storage/fs/file_system.h"
#include "storage/writer/job_writer.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

using nlohmann::json;
using testing::OwnedOp;
using testing::OwnedTensor;
using testing::readFile;
using testing::TempDir;

const std::string kGolden = DUMPD_SOURCE_DIR "/tests/storage/golden/";

std::vector<std::byte> fromHex(const std::string& hex) {
  std::vector<std::byte> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::byte>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

// make_golden.py's ramp(): float32 values ((i * 7) % 1000) * 0.125 - 50.
std::vector<std::byte> ramp(uint64_t n) {
  std::vector<std::byte> out(n * 4);
  for (uint64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>((i * 7) % 1000) * 0.125f - 50.0f;
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
  return out;
}

config::StatCategory categoryNamed(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(config::StatCategory::kSha1); ++i) {
    auto c = static_cast<config::StatCategory>(i);
    if (config::statCategoryName(c) == name) return c;
  }
  ADD_FAILURE() << "unknown category " << name;
  return config::StatCategory::kMax;
}

struct Golden {
  json cases;
  std::vector<OwnedOp> ops;

  Golden() {
    auto text = readFile(kGolden + "cases.json");
    EXPECT_TRUE(text.has_value()) << kGolden;
    cases = json::parse(text.value_or("{}"), nullptr, false);
    for (const json& o : cases["ops"]) {
      OwnedOp op;
      op.op_type = o["op_type"];
      op.op_name = o["op_name"];
      for (const json& t : o["tensors"]) {
        OwnedTensor tensor;
        tensor.io = t["io"] == "input" ? Io::kInput : Io::kOutput;
        tensor.slot = t["slot"];
        tensor.dtype = dtypeFromName(t["dtype"].get<std::string>()).value();
        tensor.shape = t["shape"].get<std::vector<int64_t>>();
        tensor.timestamp_us = t["timestamp_us"];
        tensor.bytes = t.contains("hex") ? fromHex(t["hex"]) : ramp(t["values"]["ramp"]);
        op.tensors.push_back(std::move(tensor));
      }
      ops.push_back(std::move(op));
    }
  }

  config::DumpPlan plan(config::MsFormat format) const {
    config::DumpPlan p = testing::makePlan(config::SavedData::kFull, format);
    p.statistic_category.clear();
    for (const json& name : cases["categories"][std::string(config::msFormatName(format))]) {
      p.statistic_category.push_back(categoryNamed(name));
    }
    return p;
  }
};

class GoldenTest : public ::testing::TestWithParam<config::MsFormat> {
 protected:
  std::unique_ptr<JobWriter> make() {
    auto fs = openPosixFileSystem(root_.path());
    EXPECT_TRUE(fs.has_value());
    auto w = JobWriter::create(fs.value(), golden_.plan(GetParam()), {});
    EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().message);
    return std::move(w.value());
  }

  // Compares the iteration directory with the golden files.
  void expectGolden() {
    const std::string dir = root_.path() + "/rank_0/Net/0/0/";
    const std::string gen(config::msFormatName(GetParam()));
    EXPECT_EQ(readFile(dir + "statistic.csv").value_or("(none)"),
              readFile(kGolden + gen + "/statistic.csv").value_or("(no golden)"));
    size_t npy = 0;
    std::string mapped;
    for (const std::string& name : testing::listFiles(dir)) {
      if (!name.ends_with(".npy")) continue;
      ++npy;
      auto golden = readFile(kGolden + "npy/" + name);
      if (!golden) {
        mapped = name;  // the one name over 255 bytes: checked through mapping.csv below
        continue;
      }
      EXPECT_TRUE(readFile(dir + name) == golden) << name;
    }
    EXPECT_EQ(npy, testing::listFiles(kGolden + "npy").size());
    const std::string mapping = readFile(dir + "mapping.csv").value_or("");
    ASSERT_EQ(mapping.rfind(mapped + ",Op.Default_", 0), 0u) << mapping;
    EXPECT_EQ(mapping.size(), mapped.size() + 1 + 256 + 1) << "one line naming 256 bytes";
    EXPECT_TRUE(readFile(dir + mapped) == readFile(kGolden + "npy/long.npy"));
    // MindSpore's modes: directories 0700, tensor files 0400; statistic.csv 0600 (dumpd).
    EXPECT_EQ(modeOf(dir), 0700u);
    EXPECT_EQ(modeOf(root_.path() + "/rank_0"), 0700u);
    EXPECT_EQ(modeOf(dir + mapped), 0400u);
    EXPECT_EQ(modeOf(dir + "statistic.csv"), 0600u);
  }

  static unsigned modeOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }

  Golden golden_;
  TempDir root_;
};

TEST_P(GoldenTest, OneThreadWritesTheGoldenTree) {
  auto w = make();
  for (OwnedOp& op : golden_.ops) ASSERT_TRUE(w->writeOp(op.record()));
  ASSERT_TRUE(w->completeIteration(0, 0));
  expectGolden();
}

TEST_P(GoldenTest, FourThreadsInReverseWriteTheSameRowsWithTickets) {
  auto w = make();
  std::vector<OpRecord> records;
  for (OwnedOp& op : golden_.ops) {
    records.push_back(op.record());
    records.back().row_ticket = w->takeRowTicket();
  }
  // The last op first: every row waits for the first ticket, then all come in order.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = records.size(); i-- > 0;) {
        if (i % 4 == static_cast<size_t>(t)) {
          EXPECT_TRUE(w->writeOp(records[i]));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(w->completeIteration(0, 0));
  expectGolden();
}

INSTANTIATE_TEST_SUITE_P(Generations, GoldenTest,
                         ::testing::Values(config::MsFormat::k26, config::MsFormat::k27),
                         [](const auto& info) {
                           return info.param == config::MsFormat::k26 ? "ms2_6" : "ms2_7";
                         });

}  // namespace
}  // namespace dumpd::storage
