// The payload gate's accounts (storage/writer/payload_gate.h): a quota shared by a job's
// sessions, and the journal allowance and free-space floor journal lines pass.
#include "storage/writer/payload_gate.h"

#include <gtest/gtest.h>

#include <memory>

#include "storage/fs/memory_file_system.h"

namespace dumpd::storage {
namespace {

TEST(PayloadGate, GatesSharingAnAccountShareTheQuota) {
  auto fs = std::make_shared<MemoryFileSystem>();
  auto account = std::make_shared<QuotaAccount>();
  PayloadGate first(fs, 1000, 0, account);
  ASSERT_TRUE(first.admit(600).value());
  first.release(600, 600);
  // A reconnection of the same job: a new gate, the same account.
  PayloadGate second(fs, 1000, 0, account);
  EXPECT_TRUE(second.admit(400).value());
  EXPECT_FALSE(second.admit(1).value());
  EXPECT_NE(second.stopReason().find("quota of 1000 bytes"), std::string::npos);
  // A gate of its own account is not charged for them.
  PayloadGate other(fs, 1000, 0);
  EXPECT_TRUE(other.admit(1000).value());
}

TEST(PayloadGate, JournalLinesHaveAnAllowanceOfTheirOwn) {
  auto fs = std::make_shared<MemoryFileSystem>();
  auto account = std::make_shared<QuotaAccount>();
  PayloadGate gate(fs, 100, 0, account, 4096);
  EXPECT_TRUE(gate.admitJournal(4000).value());
  EXPECT_FALSE(gate.admitJournal(200).value());
  EXPECT_NE(gate.journalRefusal().find("journal allowance of 4096 bytes"), std::string::npos);
  EXPECT_TRUE(gate.admitJournal(96).value());
  // Payloads are not stopped by a refused line, nor charged for lines.
  EXPECT_FALSE(gate.stopped());
  EXPECT_TRUE(gate.admit(100).value());
  // The allowance is the job's: a reconnection does not get a new one.
  PayloadGate again(fs, 100, 0, account, 4096);
  EXPECT_FALSE(again.admitJournal(1).value());
}

TEST(PayloadGate, JournalLinesPassTheFreeSpaceFloor) {
  auto fs = std::make_shared<MemoryFileSystem>();
  fs->setCapacity(1 << 20);
  PayloadGate gate(fs, 0, uint64_t{2} << 20, nullptr, 0);
  EXPECT_FALSE(gate.admitJournal(100).value());
  EXPECT_NE(gate.journalRefusal().find("min_free_bytes"), std::string::npos);
  PayloadGate roomy(fs, 0, 4096, nullptr, 0);
  EXPECT_TRUE(roomy.admitJournal(100).value());
}

}  // namespace
}  // namespace dumpd::storage
