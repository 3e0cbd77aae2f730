// linkFile and copyFile: the contract on every implementation, hard links and copies on POSIX,
// and copyFileData.
#include "storage/fs/file_system.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "storage/fs/file_copy.h"
#include "tests/storage/file_system_fixture.h"

namespace dumpd::storage {
namespace {

using testing::commitFile;
using testing::FileSystemContractTest;
using testing::linkOrCopy;
using testing::statOf;
using testing::TempDir;

// --- linkFile: another name for a committed file ---

TEST_P(FileSystemContractTest, LinkedFileIsInvisibleUntilCommittedThenReadsTheOriginal) {
  auto d = dir("d");
  commitFile(*d, "a.npy", "tensor bytes");
  auto f = linkOrCopy(*d, "a.npy", "b.npy", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->path(), "d/b.npy");
  // 0 for a hard link; the copy's size where it is a copy.
  EXPECT_EQ(f.value()->bytesWritten(), GetParam() == "posix" ? 0u : 12u);
  EXPECT_FALSE(h_->exists("d/b.npy"));
  std::vector<std::string> before = h_->files();
  ASSERT_EQ(before.size(), 2u);
  EXPECT_TRUE(isTemporaryName(before[0].substr(2))) << before[0];
  ASSERT_TRUE(f.value()->sync());
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->files(), (std::vector<std::string>{"d/a.npy", "d/b.npy"}));
  EXPECT_EQ(h_->read("d/b.npy"), "tensor bytes");
  EXPECT_EQ(h_->read("d/a.npy"), "tensor bytes");
  EXPECT_EQ(h_->mode("d/a.npy"), 0400u);
  EXPECT_EQ(h_->mode("d/b.npy"), 0400u);
}

TEST_P(FileSystemContractTest, CommitOfALinkReplacesAnOlderFile) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  commitFile(*d, "b", "older");
  auto f = linkOrCopy(*d, "a", "b", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(h_->read("d/b"), "older");
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->read("d/b"), "original");
  EXPECT_EQ(h_->read("d/a"), "original");
  EXPECT_EQ(h_->files(), (std::vector<std::string>{"d/a", "d/b"}));
}

// rename() over another name of the same file does nothing: the temporary name must still go.
TEST_P(FileSystemContractTest, LinkingOverAnotherNameOfTheSameFileLeavesNoTemporary) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  for (const char* name : {"b", "b", "a"}) {
    auto f = linkOrCopy(*d, "a", name, 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    ASSERT_TRUE(f.value()->commit()) << name;
  }
  EXPECT_EQ(h_->files(), (std::vector<std::string>{"d/a", "d/b"}));
  EXPECT_EQ(h_->read("d/a"), "original");
  EXPECT_EQ(h_->read("d/b"), "original");
}

TEST_P(FileSystemContractTest, LinkingAMissingFileIsNotFound) {
  auto d = dir("d");
  auto f = linkOrCopy(*d, "missing.npy", "b.npy", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kNotFound);
  EXPECT_NE(f.error().message.find("d/missing.npy"), std::string::npos) << f.error().message;
  EXPECT_TRUE(h_->files().empty());
}

TEST_P(FileSystemContractTest, LinkingASymlinkIsRefusedAndCreatesNothing) {
  h_->plantSymlink("d/escape");
  auto d = dir("d");
  auto f = linkOrCopy(*d, "escape", "b.npy", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kPermission);
  EXPECT_NE(f.error().message.find("d/escape"), std::string::npos) << f.error().message;
  EXPECT_NE(f.error().message.find("symbolic link"), std::string::npos) << f.error().message;
  EXPECT_FALSE(h_->exists("d/b.npy"));
  EXPECT_TRUE(h_->files().empty());
}

TEST_P(FileSystemContractTest, LinkingADirectoryIsInvalidArgument) {
  ASSERT_TRUE(fs().createDirectories("d/sub"));
  auto d = dir("d");
  auto f = linkOrCopy(*d, "sub", "b", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(f.error().message.find("d/sub"), std::string::npos) << f.error().message;
  EXPECT_TRUE(h_->files().empty());
}

TEST_P(FileSystemContractTest, AbortAndDestructionOfALinkLeaveOnlyTheOriginal) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  {
    auto f = linkOrCopy(*d, "a", "b", 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    f.value()->abort();
    f.value()->abort();  // idempotent
  }
  {
    auto f = linkOrCopy(*d, "a", "c", 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
  }  // destroyed without commit
  EXPECT_EQ(h_->files(), std::vector<std::string>{"d/a"});
  EXPECT_EQ(h_->read("d/a"), "original");
  EXPECT_EQ(h_->mode("d/a"), 0400u);
}

TEST_P(FileSystemContractTest, WritingToALinkedFileIsRefused) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  auto f = linkOrCopy(*d, "a", "b", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  auto s = f.value()->write(asBytes("more"));
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(s.error().message.find("d/b"), std::string::npos) << s.error().message;
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(h_->read("d/a"), "original");
  EXPECT_EQ(h_->read("d/b"), "original");
}

// Where there are no links (posix_copy, memory) linkFile says so and creates nothing; a copy
// is always a file of its own, even where a link would be possible.
TEST_P(FileSystemContractTest, LinkFileRefusedIsUnsupportedAndCopyFileAlwaysCopies) {
  auto d = dir("d");
  commitFile(*d, "a", "original");
  auto link = d->linkFile("a", "b");
  if (GetParam() == "posix") {
    ASSERT_TRUE(link.has_value()) << link.error().message;
    EXPECT_EQ(link.value()->bytesWritten(), 0u);
    ASSERT_TRUE(link.value()->commit());
  } else {
    ASSERT_FALSE(link.has_value());
    EXPECT_EQ(link.error().code, ErrorCode::kUnsupported) << link.error().message;
    EXPECT_NE(link.error().message.find("d/a"), std::string::npos) << link.error().message;
    EXPECT_EQ(h_->files(), std::vector<std::string>{"d/a"});
  }
  auto copy = d->copyFile("a", "c", 0440);
  ASSERT_TRUE(copy.has_value()) << copy.error().message;
  EXPECT_EQ(copy.value()->bytesWritten(), 8u);
  EXPECT_FALSE(copy.value()->write(asBytes("more")).has_value());
  ASSERT_TRUE(copy.value()->commit());
  EXPECT_EQ(h_->read("d/c"), "original");
  EXPECT_EQ(h_->mode("d/c"), 0440u);
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(PosixFileSystemTest, ALinkIsAHardLinkToTheOriginal) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("", {});
  commitFile(*d.value(), "a", "original", 0400);
  auto f = d.value()->linkFile("a", "b");  // a link has the original's mode
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), 0u);
  ASSERT_TRUE(f.value()->commit());
  struct stat a = statOf(root.path() + "/a"), b = statOf(root.path() + "/b");
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(b.st_nlink, 2u);
  EXPECT_EQ(b.st_mode & 07777, 0400u);
  EXPECT_EQ(testing::readFile(root.path() + "/b"), "original");
}

TEST(PosixFileSystemTest, ACopyIsAFileOfItsOwnEvenWhereALinkIsPossible) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path());
  auto d = fs.value()->openDirectory("", {});
  commitFile(*d.value(), "a", "original", 0400);
  auto f = d.value()->copyFile("a", "b", 0640);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), 8u);
  ASSERT_TRUE(f.value()->commit());
  struct stat a = statOf(root.path() + "/a"), b = statOf(root.path() + "/b");
  EXPECT_NE(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 1u);
  EXPECT_EQ(b.st_mode & 07777, 0640u);
  EXPECT_EQ(testing::readFile(root.path() + "/b"), "original");
}

TEST(PosixFileSystemTest, WithoutHardLinksLinkFileIsUnsupportedAndCopyFileCopies) {
  TempDir root;
  auto fs = openPosixFileSystem(root.path(), PosixOptions{.hard_links = false});
  auto d = fs.value()->openDirectory("", {});
  std::string text(3 * 1024 * 1024 + 7, '\0');  // more than one buffer of a read/write copy
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 131 + i / 4096);
  commitFile(*d.value(), "a", text, 0400);
  auto refused = d.value()->linkFile("a", "b");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnsupported) << refused.error().message;
  EXPECT_EQ(testing::listFiles(root.path()), std::vector<std::string>{"a"});
  auto f = d.value()->copyFile("a", "b", 0640);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), text.size());
  ASSERT_TRUE(f.value()->sync());
  ASSERT_TRUE(f.value()->commit());
  struct stat a = statOf(root.path() + "/a"), b = statOf(root.path() + "/b");
  EXPECT_NE(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 1u);
  EXPECT_EQ(b.st_nlink, 1u);
  EXPECT_EQ(b.st_mode & 07777, 0640u);
  EXPECT_EQ(testing::readFile(root.path() + "/b"), text);
}

TEST(PosixFileSystemTest, ASymlinkToAFileOutsideTheRootIsNotLinked) {
  TempDir root, outside;
  const std::string secret = outside.path() + "/secret";
  writeFile(secret, "secret");
  ASSERT_EQ(::symlink(secret.c_str(), (root.path() + "/s").c_str()), 0);
  for (bool hard_links : {true, false}) {
    auto fs = openPosixFileSystem(root.path(), PosixOptions{.hard_links = hard_links});
    auto d = fs.value()->openDirectory("", {});
    auto link = d.value()->linkFile("s", "b");
    ASSERT_FALSE(link.has_value());
    EXPECT_EQ(link.error().code, ErrorCode::kPermission);
    EXPECT_NE(link.error().message.find("link s"), std::string::npos) << link.error().message;
    auto copy = d.value()->copyFile("s", "b", 0644);
    ASSERT_FALSE(copy.has_value());
    EXPECT_EQ(copy.error().code, ErrorCode::kPermission);
    EXPECT_NE(copy.error().message.find("copy s"), std::string::npos) << copy.error().message;
  }
  EXPECT_EQ(testing::listFiles(root.path()), std::vector<std::string>{"s"});
  EXPECT_EQ(statOf(secret).st_nlink, 1u);
}

// copy_file_range refuses a pipe (EINVAL): the copy goes on through a buffer.
TEST(FileCopyTest, CopiesFromAPipeThroughABuffer) {
  TempDir root;
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const std::string text(5000, 'p');
  ASSERT_EQ(::write(pipe_fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(pipe_fds[1]);
  UniqueFd in(pipe_fds[0]);
  UniqueFd out(::open((root.path() + "/copy").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(out.valid());
  CopyOutcome copied = copyFileData(in.get(), out.get());
  EXPECT_EQ(copied.error, 0);
  EXPECT_EQ(copied.bytes, text.size());
  EXPECT_EQ(testing::readFile(root.path() + "/copy"), text);
}

TEST(FileCopyTest, ReportsTheErrnoOfAFailedWrite) {
  TempDir root;
  const std::string path = root.path() + "/in";
  writeFile(path, "data");
  UniqueFd in(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd out(::open(path.c_str(), O_RDONLY | O_CLOEXEC));  // not writable
  CopyOutcome copied = copyFileData(in.get(), out.get());
  EXPECT_EQ(copied.error, EBADF);
  EXPECT_EQ(copied.bytes, 0u);
}

}  // namespace
}  // namespace dumpd::storage
