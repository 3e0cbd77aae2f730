// MemoryFileSystem's simulated crashes and capacity, and FaultInjectingFileSystem.
#include "storage/fs/file_system.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "storage/fs/fault_injection.h"
#include "storage/fs/memory_file_system.h"
#include "tests/storage/file_system_fixture.h"

namespace dumpd::storage {
namespace {

using testing::commitFile;

TEST(MemoryFileSystemTest, UnsyncedFilesAndEntriesAreLostInACrash) {
  MemoryFileSystem fs;
  auto d = fs.openDirectory("d", {.create = true, .sync_created = true});
  auto write = [&](const char* name, bool sync_file, bool sync_dir) {
    auto f = d.value()->newFile(name, 0400);
    ASSERT_TRUE(f.value()->write(asBytes("data")));
    if (sync_file) {
      ASSERT_TRUE(f.value()->sync());
    }
    ASSERT_TRUE(f.value()->commit());
    if (sync_dir) {
      ASSERT_TRUE(d.value()->sync());
    }
  };
  write("neither", false, false);
  write("file_only", true, false);
  write("both", true, true);
  fs.simulateCrash();
  EXPECT_EQ(fs.readFile("d/both"), "data");
  // "neither" and "file_only" were made durable as entries by the later directory sync, but
  // only "file_only" kept its contents.
  EXPECT_EQ(fs.readFile("d/file_only"), "data");
  EXPECT_EQ(fs.readFile("d/neither"), "");
}

TEST(MemoryFileSystemTest, EntriesWithoutADirectorySyncVanish) {
  MemoryFileSystem fs;
  auto d = fs.openDirectory("d", {.create = true, .sync_created = true});
  auto f = d.value()->newFile("x", 0400);
  ASSERT_TRUE(f.value()->write(asBytes("data")));
  ASSERT_TRUE(f.value()->sync());
  ASSERT_TRUE(f.value()->commit());
  auto sub = fs.openDirectory("d/unsynced/deeper", {.create = true});
  fs.simulateCrash();
  EXPECT_TRUE(fs.exists("d"));
  EXPECT_FALSE(fs.exists("d/x"));
  EXPECT_FALSE(fs.exists("d/unsynced"));
}

TEST(MemoryFileSystemTest, CapacityGivesNoSpaceNamingTheFile) {
  MemoryFileSystem fs;
  fs.setCapacity(10);
  auto d = fs.openDirectory("d", {.create = true});
  auto f = d.value()->newFile("big.npy", 0400);
  auto s = f.value()->write(asBytes("01234567890"));
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kNoSpace);
  EXPECT_NE(s.error().message.find("d/big.npy"), std::string::npos);
  f.value()->abort();
  EXPECT_EQ(fs.usedBytes(), 0u);
  EXPECT_EQ(fs.freeBytes().value(), 10u);
  auto a = d.value()->openAppend("c.csv");
  ASSERT_TRUE(a.value()->append("12345"));
  EXPECT_FALSE(a.value()->append("123456").has_value());
  EXPECT_EQ(fs.readFile("d/c.csv"), "12345");
}

TEST(MemoryFileSystemTest, ACopyCountsAgainstTheCapacity) {
  MemoryFileSystem fs;
  fs.setCapacity(10);
  auto d = fs.openDirectory("d", {.create = true});
  commitFile(*d.value(), "a", "123456");
  auto full = d.value()->copyFile("a", "b", 0400);
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().code, ErrorCode::kNoSpace);
  EXPECT_NE(full.error().message.find("d/b"), std::string::npos) << full.error().message;
  EXPECT_EQ(fs.usedBytes(), 6u);
  EXPECT_FALSE(fs.exists("d/b"));
  fs.setCapacity(20);
  auto f = d.value()->copyFile("a", "b", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), 6u);
  EXPECT_EQ(fs.usedBytes(), 12u);
  f.value()->abort();
  EXPECT_EQ(fs.usedBytes(), 6u);
}

TEST(MemoryFileSystemTest, ACopyIsDurableLikeANewFile) {
  MemoryFileSystem fs;
  auto d = fs.openDirectory("d", {.create = true, .sync_created = true});
  auto link = [&](const char* name, bool sync_file) {
    auto f = d.value()->copyFile("a", name, 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    if (sync_file) {
      ASSERT_TRUE(f.value()->sync());
    }
    ASSERT_TRUE(f.value()->commit());
  };
  commitFile(*d.value(), "a", "data");
  ASSERT_TRUE(d.value()->syncFile("a"));
  link("unsynced", false);
  link("synced", true);
  ASSERT_TRUE(d.value()->sync());
  link("no_directory_sync", true);
  fs.simulateCrash();
  EXPECT_EQ(fs.readFile("d/a"), "data");
  EXPECT_EQ(fs.readFile("d/synced"), "data");
  EXPECT_EQ(fs.readFile("d/unsynced"), "");
  EXPECT_FALSE(fs.exists("d/no_directory_sync"));
}

TEST(FaultInjectionTest, FailsExactlyTheChosenCall) {
  auto base = std::make_shared<MemoryFileSystem>();
  FaultInjectingFileSystem fs(base);
  fs.failCall(2, ErrorCode::kIo);
  auto d = fs.openDirectory("d", {.create = true});  // call 0
  ASSERT_TRUE(d.has_value());
  auto f = d.value()->newFile("x.npy", 0400);  // call 1
  ASSERT_TRUE(f.has_value());
  auto s = f.value()->write(asBytes("abc"));  // call 2: fails
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kIo);
  EXPECT_NE(s.error().message.find("d/x.npy"), std::string::npos);
  EXPECT_NE(s.error().message.find("(injected)"), std::string::npos);
  EXPECT_TRUE(f.value()->write(asBytes("abc")));  // call 3
  EXPECT_EQ(fs.calls(), 4u);
  EXPECT_EQ(fs.calls(FsOp::kWrite), 2u);
  EXPECT_EQ(fs.faultsInjected(), 1u);
}

TEST(FaultInjectionTest, AFailedCommitLeavesNoTemporaryFile) {
  auto base = std::make_shared<MemoryFileSystem>();
  FaultInjectingFileSystem fs(base);
  fs.failEvery(FsOp::kCommit, ErrorCode::kNoSpace);
  auto d = fs.openDirectory("d", {.create = true});
  auto f = d.value()->newFile("x.npy", 0400);
  ASSERT_TRUE(f.value()->write(asBytes("abc")));
  auto s = f.value()->commit();
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kNoSpace);
  for (const auto& e : base->list()) {
    EXPECT_NE(e.kind, MemoryFileSystem::Entry::Kind::kFile) << e.path;
  }
  fs.clearFaults();
  auto g = d.value()->newFile("y.npy", 0400);
  EXPECT_TRUE(g.value()->commit());
}

TEST(FaultInjectionTest, EveryKindCanBeFailedWithEachCode) {
  const std::pair<ErrorCode, const char*> codes[] = {{ErrorCode::kNoSpace, "No space"},
                                                     {ErrorCode::kIo, "Input/output"},
                                                     {ErrorCode::kPermission, "Permission denied"},
                                                     {ErrorCode::kUnsupported, "Too many links"}};
  for (auto [code, text] : codes) {
    auto base = std::make_shared<MemoryFileSystem>();
    FaultInjectingFileSystem fs(base);
    fs.failEvery(FsOp::kAppend, code);
    fs.failEvery(FsOp::kFreeBytes, code);
    fs.failEvery(FsOp::kLink, code);
    fs.failEvery(FsOp::kCopy, code);
    auto d = fs.openDirectory("d", {.create = true});
    auto a = d.value()->openAppend("m.csv");
    auto s = a.value()->append("x");
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error().code, code);
    EXPECT_NE(s.error().message.find(text), std::string::npos) << s.error().message;
    EXPECT_FALSE(fs.freeBytes().has_value());
    auto l = d.value()->linkFile("m.csv", "n.csv");
    ASSERT_FALSE(l.has_value());
    EXPECT_EQ(l.error().code, code);
    EXPECT_NE(l.error().message.find("link d/n.csv: " + std::string(text)), std::string::npos)
        << l.error().message;
    auto c = d.value()->copyFile("m.csv", "n.csv", 0644);
    ASSERT_FALSE(c.has_value());
    EXPECT_EQ(c.error().code, code);
    EXPECT_NE(c.error().message.find("copy d/n.csv: " + std::string(text)), std::string::npos)
        << c.error().message;
    EXPECT_FALSE(base->exists("d/n.csv"));
  }
}

TEST(FaultInjectionTest, ALinkAndACopyAreCountedAsSuchAndTheirCommitAsCommit) {
  auto base = std::make_shared<MemoryFileSystem>();
  FaultInjectingFileSystem fs(base);
  auto d = fs.openDirectory("d", {.create = true});  // call 0
  commitFile(*d.value(), "a", "data");               // calls 1-3
  fs.failCall(4, ErrorCode::kIo);
  auto failed = d.value()->linkFile("a", "b");  // call 4: fails
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().code, ErrorCode::kIo);
  EXPECT_NE(failed.error().message.find("d/b"), std::string::npos);
  EXPECT_NE(failed.error().message.find("(injected)"), std::string::npos);
  EXPECT_EQ(fs.calls(FsOp::kLink), 1u);
  fs.failEvery(FsOp::kCommit, ErrorCode::kNoSpace);
  auto f = d.value()->copyFile("a", "b", 0400);  // call 5
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto s = f.value()->commit();  // call 6: fails, and takes the temporary file away
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kNoSpace);
  EXPECT_EQ(fs.calls(FsOp::kLink), 1u);
  EXPECT_EQ(fs.calls(FsOp::kCopy), 1u);
  EXPECT_EQ(fs.calls(FsOp::kCommit), 2u);
  EXPECT_EQ(fs.calls(), 7u);
  std::vector<std::string> files;
  for (const auto& e : base->list()) {
    if (e.kind == MemoryFileSystem::Entry::Kind::kFile) files.push_back(e.path);
  }
  EXPECT_EQ(files, std::vector<std::string>{"d/a"});
  fs.clearFaults();
  auto g = d.value()->copyFile("a", "b", 0400);
  ASSERT_TRUE(g.has_value());
  ASSERT_TRUE(g.value()->commit());
  EXPECT_EQ(base->readFile("d/b"), "data");
}

}  // namespace
}  // namespace dumpd::storage
