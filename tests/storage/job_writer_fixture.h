// The fixture of the job_writer_*_test.cc files: a JobWriter over an in-memory file system and
// the spec's example op (an Add with two inputs and one output).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "storage/writer/job_writer.h"
#include "tests/storage/storage_test_util.h"
#include "tests/storage/writer_fixture.h"

namespace dumpd::storage::testing {

inline constexpr uint64_t kTs = 1700000000000000;

inline OwnedOp specExampleOp(uint64_t ts = kTs) {
  OwnedOp op;
  op.tensors.push_back(floatTensor(Io::kInput, 0, {2, 3}, {1, 2, 3, 4, 5, 6}, ts));
  op.tensors.push_back(floatTensor(Io::kInput, 1, {2, 3}, {7, 8, 9, 10, 11, 12}, ts + 1));
  op.tensors.push_back(floatTensor(Io::kOutput, 0, {2, 3}, {8, 10, 12, 14, 16, 18}, ts + 2));
  return op;
}

class JobWriterTest : public testing::WriterFixture {
 protected:
  std::vector<std::string> npyFilesIn(const std::string& dir) {
    std::vector<std::string> out;
    for (auto& f : filesIn(dir)) {
      if (f.find(".npy") != std::string::npos) out.push_back(f);
    }
    return out;
  }
};

}  // namespace dumpd::storage::testing
