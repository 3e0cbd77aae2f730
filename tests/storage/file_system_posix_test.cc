// The POSIX file system's own cases: an O_PATH root fd, bad roots, a FIFO, permission errors, and
// writes cut short by RLIMIT_FSIZE that leave nothing partial.
#include "storage/fs/file_system.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "tests/storage/file_system_fixture.h"

namespace dumpd::storage {
namespace {

using testing::TempDir;

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

}  // namespace
}  // namespace dumpd::storage
