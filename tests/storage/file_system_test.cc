#include "storage/file_system.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <memory>

#include "storage/fault_injection.h"
#include "storage/memory_file_system.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

using testing::TempDir;

// The same contract tests run against the POSIX and the in-memory implementation.
class FsHarness {
 public:
  virtual ~FsHarness() = default;
  virtual FileSystem& fs() = 0;
  // Regular files beneath the root (root-relative, sorted).
  virtual std::vector<std::string> files() = 0;
  virtual std::optional<std::string> read(const std::string& path) = 0;
  virtual std::optional<uint32_t> mode(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
  // Plants a symlink at `path` pointing outside the root (to a real directory for POSIX).
  virtual void plantSymlink(const std::string& path) = 0;
};

class PosixHarness final : public FsHarness {
 public:
  PosixHarness() {
    auto fs = openPosixFileSystem(root_.path());
    EXPECT_TRUE(fs.has_value());
    fs_ = fs.value();
  }
  FileSystem& fs() override { return *fs_; }
  std::vector<std::string> files() override {
    std::vector<std::string> out;
    for (const auto& f : testing::listFiles(root_.path())) {
      if (!std::filesystem::is_symlink(root_.path() + "/" + f)) out.push_back(f);
    }
    return out;
  }
  std::optional<std::string> read(const std::string& path) override {
    return testing::readFile(root_.path() + "/" + path);
  }
  std::optional<uint32_t> mode(const std::string& path) override {
    struct stat st;
    if (::lstat((root_.path() + "/" + path).c_str(), &st) != 0) return std::nullopt;
    return st.st_mode & 07777;
  }
  bool exists(const std::string& path) override {
    struct stat st;
    return ::lstat((root_.path() + "/" + path).c_str(), &st) == 0;
  }
  void plantSymlink(const std::string& path) override {
    std::string full = root_.path() + "/" + path;
    std::filesystem::create_directories(std::filesystem::path(full).parent_path());
    EXPECT_EQ(::symlink(outside_.path().c_str(), full.c_str()), 0);
  }
  const TempDir& outside() const { return outside_; }
  const std::string& root() const { return root_.path(); }

 private:
  TempDir root_;
  TempDir outside_;
  std::shared_ptr<FileSystem> fs_;
};

class MemoryHarness final : public FsHarness {
 public:
  FileSystem& fs() override { return fs_; }
  std::vector<std::string> files() override {
    std::vector<std::string> out;
    for (const auto& e : fs_.list()) {
      if (e.kind == MemoryFileSystem::Entry::Kind::kFile) out.push_back(e.path);
    }
    return out;
  }
  std::optional<std::string> read(const std::string& path) override { return fs_.readFile(path); }
  std::optional<uint32_t> mode(const std::string& path) override { return fs_.fileMode(path); }
  bool exists(const std::string& path) override { return fs_.exists(path); }
  void plantSymlink(const std::string& path) override { fs_.addSymlink(path, "/etc"); }
  MemoryFileSystem& memory() { return fs_; }

 private:
  MemoryFileSystem fs_;
};

class FileSystemContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "posix") {
      h_ = std::make_unique<PosixHarness>();
    } else {
      h_ = std::make_unique<MemoryHarness>();
    }
  }
  FileSystem& fs() { return h_->fs(); }
  std::shared_ptr<Directory> dir(const std::string& path) {
    auto d = fs().openDirectory(path, {.create = true});
    EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().message);
    return d ? d.value() : nullptr;
  }
  std::unique_ptr<FsHarness> h_;
};

INSTANTIATE_TEST_SUITE_P(Impl, FileSystemContractTest, ::testing::Values("posix", "memory"),
                         [](const auto& info) { return info.param; });

TEST_P(FileSystemContractTest, CreatesMissingDirectoriesBeneathTheRoot) {
  ASSERT_TRUE(fs().createDirectories("rank_0/Net/0/1"));
  EXPECT_TRUE(h_->exists("rank_0/Net/0/1"));
  auto again = fs().openDirectory("rank_0/Net/0/1", {});
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again.value()->path(), "rank_0/Net/0/1");
}

TEST_P(FileSystemContractTest, OpeningAMissingDirectoryWithoutCreateIsNotFound) {
  auto d = fs().openDirectory("nope/deeper", {});
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code, ErrorCode::kNotFound);
  EXPECT_NE(d.error().message.find("nope"), std::string::npos);
  EXPECT_FALSE(h_->exists("nope"));
}

TEST_P(FileSystemContractTest, RejectsEmptyDotAndDotDotComponents) {
  for (const char* bad : {"a//b", "../x", "a/./b", "/abs", "a/", "..", ".", "a/.."}) {
    auto d = fs().openDirectory(bad, {.create = true});
    ASSERT_FALSE(d.has_value()) << bad;
    EXPECT_EQ(d.error().code, ErrorCode::kInvalidArgument) << bad;
  }
  auto d = dir("ok");
  for (const char* bad : {"", ".", "..", "a/b"}) {
    EXPECT_FALSE(d->newFile(bad, 0644).has_value()) << bad;
    EXPECT_FALSE(d->openAppend(bad).has_value()) << bad;
  }
}

TEST_P(FileSystemContractTest, FileIsInvisibleUntilCommitted) {
  auto d = dir("d");
  auto f = d->newFile("x.npy", 0400);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f.value()->path(), "d/x.npy");
  ASSERT_TRUE(f.value()->write(asBytes("hello ")));
  ConstBuffer parts[2] = {asBytes("wor"), asBytes("ld")};
  ASSERT_TRUE(f.value()->write(std::span<const ConstBuffer>(parts, 2)));
  EXPECT_EQ(f.value()->bytesWritten(), 11u);
  std::vector<std::string> before = h_->files();
  ASSERT_EQ(before.size(), 1u);
  EXPECT_TRUE(isTemporaryName(before[0].substr(2))) << before[0];
  ASSERT_TRUE(f.value()->sync());
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->files(), std::vector<std::string>{"d/x.npy"});
  EXPECT_EQ(h_->read("d/x.npy"), "hello world");
  EXPECT_EQ(h_->mode("d/x.npy"), 0400u);
}

TEST_P(FileSystemContractTest, AbortAndDestructionRemoveTheTemporaryFile) {
  auto d = dir("d");
  {
    auto f = d->newFile("a.npy", 0400);
    ASSERT_TRUE(f.value()->write(asBytes("partial")));
    f.value()->abort();
    f.value()->abort();  // idempotent
  }
  {
    auto f = d->newFile("b.npy", 0400);
    ASSERT_TRUE(f.value()->write(asBytes("partial")));
  }  // destroyed without commit
  EXPECT_TRUE(h_->files().empty());
}

TEST_P(FileSystemContractTest, CommitReplacesAnOlderFile) {
  auto d = dir("d");
  for (const char* text : {"old", "new"}) {
    auto f = d->newFile("f", 0644);
    ASSERT_TRUE(f.value()->write(asBytes(text)));
    ASSERT_TRUE(f.value()->commit());
  }
  EXPECT_EQ(h_->read("d/f"), "new");
  EXPECT_EQ(h_->files().size(), 1u);
}

TEST_P(FileSystemContractTest, AppendCreatesThenAppendsAndReportsSize) {
  auto d = dir("d");
  {
    auto a = d->openAppend("statistic.csv");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a.value()->size(), 0u);
    ASSERT_TRUE(a.value()->append("header\n"));
    ASSERT_TRUE(a.value()->append("row1\n"));
    EXPECT_EQ(a.value()->size(), 12u);
    ASSERT_TRUE(a.value()->sync());
    EXPECT_EQ(a.value()->path(), "d/statistic.csv");
  }
  auto again = d->openAppend("statistic.csv");
  EXPECT_EQ(again.value()->size(), 12u);
  ASSERT_TRUE(again.value()->append("row2\n"));
  EXPECT_EQ(h_->read("d/statistic.csv"), "header\nrow1\nrow2\n");
}

TEST_P(FileSystemContractTest, SyncFileAndDirectory) {
  auto d = dir("d");
  auto f = d->newFile("f", 0644);
  ASSERT_TRUE(f.value()->commit());
  EXPECT_TRUE(d->syncFile("f"));
  EXPECT_TRUE(d->sync());
  auto missing = d->syncFile("missing");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("d/missing"), std::string::npos);
  auto root = fs().openDirectory("", {});
  ASSERT_TRUE(root.has_value());
  EXPECT_TRUE(root.value()->sync());
}

TEST_P(FileSystemContractTest, ErrorsNameTheFile) {
  auto d = dir("d");
  ASSERT_TRUE(fs().createDirectories("d/sub"));
  auto a = d->openAppend("sub");  // a directory
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("d/sub"), std::string::npos) << a.error().message;
  auto f = d->newFile("sub", 0644);  // commit over a directory fails
  ASSERT_TRUE(f.has_value());
  auto s = f.value()->commit();
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("d/sub"), std::string::npos) << s.error().message;
  EXPECT_TRUE(h_->files().empty());  // the temporary file went away
}

TEST_P(FileSystemContractTest, RefusesToResolveThroughASymlink) {
  h_->plantSymlink("rank_0/escape");
  for (const char* path : {"rank_0/escape", "rank_0/escape/Net/0"}) {
    auto d = fs().openDirectory(path, {.create = true});
    ASSERT_FALSE(d.has_value()) << path;
    EXPECT_EQ(d.error().code, ErrorCode::kPermission) << path;
    EXPECT_NE(d.error().message.find("rank_0/escape"), std::string::npos);
    EXPECT_NE(d.error().message.find("symbolic link"), std::string::npos);
  }
  if (auto* posix = dynamic_cast<PosixHarness*>(h_.get())) {
    EXPECT_TRUE(testing::listFiles(posix->outside().path()).empty());
  }
}

TEST_P(FileSystemContractTest, RefusesToAppendThroughASymlink) {
  h_->plantSymlink("d/statistic.csv");
  auto d = fs().openDirectory("d", {});
  ASSERT_TRUE(d.has_value());
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kPermission);
  EXPECT_NE(a.error().message.find("d/statistic.csv"), std::string::npos);
}

TEST_P(FileSystemContractTest, CommitReplacesASymlinkNotItsTarget) {
  h_->plantSymlink("d/x.npy");
  auto d = fs().openDirectory("d", {});
  auto f = d.value()->newFile("x.npy", 0400);
  ASSERT_TRUE(f.value()->write(asBytes("data")));
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->read("d/x.npy"), "data");
  if (auto* posix = dynamic_cast<PosixHarness*>(h_.get())) {
    EXPECT_FALSE(std::filesystem::is_symlink(posix->root() + "/d/x.npy"));
    EXPECT_TRUE(testing::listFiles(posix->outside().path()).empty());
  }
}

TEST_P(FileSystemContractTest, ReportsFreeBytes) {
  auto free = fs().freeBytes();
  ASSERT_TRUE(free.has_value());
  EXPECT_GT(free.value(), 0u);
}

TEST(PosixFileSystemTest, WorksOnAnOPathRootFd) {
  TempDir root;
  int fd = ::open(root.path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto fs = makePosixFileSystem(fd);
  ASSERT_TRUE(fs.has_value());
  auto d = fs.value()->openDirectory("a/b", {.create = true, .sync_created = true});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto f = d.value()->newFile("x", 0400);
  ASSERT_TRUE(f.has_value());
  ASSERT_TRUE(f.value()->write(asBytes("1")));
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(testing::readFile(root.path() + "/a/b/x"), "1");
  auto r = fs.value()->openDirectory("", {});
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r.value()->sync());
}

TEST(PosixFileSystemTest, RejectsANonDirectoryRoot) {
  TempDir root;
  std::string file = root.path() + "/f";
  ::close(::open(file.c_str(), O_CREAT | O_WRONLY, 0644));
  auto fs = makePosixFileSystem(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_FALSE(fs.has_value());
  EXPECT_FALSE(makePosixFileSystem(-1).has_value());
  EXPECT_FALSE(openPosixFileSystem(root.path() + "/missing").has_value());
}

TEST(PosixFileSystemTest, APlantedFifoDoesNotHangTheAppender) {
  TempDir root;
  ASSERT_EQ(::mkfifo((root.path() + "/statistic.csv").c_str(), 0644), 0);
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("", {});
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find("statistic.csv"), std::string::npos);
}

TEST(PosixFileSystemTest, ChownsCreatedEntriesToTheOwnerWhenPrivileged) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  TempDir root;
  PosixOptions o;
  o.owner_uid = 12345;
  o.owner_gid = 23456;
  auto fs = openPosixFileSystem(root.path(), o);
  auto d = fs.value()->openDirectory("rank_0/x", {.create = true});
  ASSERT_TRUE(d.has_value());
  auto f = d.value()->newFile("t.npy", 0400);
  ASSERT_TRUE(f.value()->commit());
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_TRUE(a.has_value());
  for (const char* p : {"rank_0", "rank_0/x", "rank_0/x/t.npy", "rank_0/x/statistic.csv"}) {
    struct stat st;
    ASSERT_EQ(::lstat((root.path() + "/" + p).c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_uid, 12345u) << p;
    EXPECT_EQ(st.st_gid, 23456u) << p;
  }
}

TEST(PosixFileSystemTest, PermissionDeniedIsReportedAsPermission) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  ASSERT_TRUE(fs.value()->createDirectories("ro"));
  ::chmod((root.path() + "/ro").c_str(), 0500);
  auto d = fs.value()->openDirectory("ro", {});
  auto f = d.value()->newFile("x", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kPermission);
  EXPECT_NE(f.error().message.find("ro/x"), std::string::npos);
  ::chmod((root.path() + "/ro").c_str(), 0700);
}

// RLIMIT_FSIZE makes a write stop part way (a short write, then EFBIG), as a full disk does.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    struct rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() { ::setrlimit(RLIMIT_FSIZE, &saved_); }

 private:
  struct rlimit saved_;
};

TEST(PosixFileSystemTest, AFailedAppendLeavesNoPartialRow) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("", {});
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_TRUE(a.has_value());
  {
    FileSizeLimit limit(100);
    ASSERT_TRUE(a.value()->append(std::string(59, 'a') + "\n"));
    auto s = a.value()->append(std::string(59, 'b') + "\n");  // 40 bytes fit, then EFBIG
    ASSERT_FALSE(s.has_value());
    EXPECT_NE(s.error().message.find("statistic.csv"), std::string::npos);
  }
  EXPECT_EQ(a.value()->size(), 60u);
  EXPECT_EQ(testing::readFile(root.path() + "/statistic.csv"), std::string(59, 'a') + "\n");
  ASSERT_TRUE(a.value()->append("next\n"));
  EXPECT_EQ(testing::readFile(root.path() + "/statistic.csv")->size(), 65u);
}

TEST(PosixFileSystemTest, AFailedWriteLeavesNoFile) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("d", {.create = true});
  {
    FileSizeLimit limit(100);
    auto f = d.value()->newFile("x.npy", 0400);
    std::string big(1000, 'x');
    auto s = f.value()->write(asBytes(big));
    ASSERT_FALSE(s.has_value());
    EXPECT_NE(s.error().message.find("d/x.npy"), std::string::npos);
  }
  EXPECT_TRUE(testing::listFiles(root.path()).empty());
}

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
                                                     {ErrorCode::kPermission, "Permission denied"}};
  for (auto [code, text] : codes) {
    auto base = std::make_shared<MemoryFileSystem>();
    FaultInjectingFileSystem fs(base);
    fs.failEvery(FsOp::kAppend, code);
    fs.failEvery(FsOp::kFreeBytes, code);
    auto d = fs.openDirectory("d", {.create = true});
    auto a = d.value()->openAppend("m.csv");
    auto s = a.value()->append("x");
    ASSERT_FALSE(s.has_value());
    EXPECT_EQ(s.error().code, code);
    EXPECT_NE(s.error().message.find(text), std::string::npos) << s.error().message;
    EXPECT_FALSE(fs.freeBytes().has_value());
  }
}

}  // namespace
}  // namespace dumpd::storage
