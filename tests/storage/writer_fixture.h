// A JobWriter over an in-memory file system, and ways to look at what it wrote: the fixture of
// job_writer_test.cc and bin_writer_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "storage/fs/memory_file_system.h"
#include "storage/writer/job_writer.h"

namespace dumpd::storage::testing {

class WriterFixture : public ::testing::Test {
 protected:
  std::unique_ptr<JobWriter> make(const config::DumpPlan& plan, JobOptions options = {}) {
    auto w = JobWriter::create(mem_, plan, std::move(options));
    EXPECT_TRUE(w.has_value()) << (w ? "" : w.error().message);
    return w ? std::move(w.value()) : nullptr;
  }
  // Regular files directly in `dir` (names relative to it), sorted.
  std::vector<std::string> filesIn(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : mem_->list()) {
      if (e.kind != MemoryFileSystem::Entry::Kind::kFile) continue;
      if (e.path.rfind(dir + "/", 0) == 0 &&
          e.path.find('/', dir.size() + 1) == std::string::npos) {
        out.push_back(e.path.substr(dir.size() + 1));
      }
    }
    return out;
  }
  std::string read(const std::string& path) { return mem_->readFile(path).value_or("<absent>"); }

  std::shared_ptr<MemoryFileSystem> mem_ = std::make_shared<MemoryFileSystem>();
};

}  // namespace dumpd::storage::testing
