// Acting as the client (PosixOptions::act_as) with real uids, root only: what the client may
// create and own, and other users' files it may not reach, replace or add to.
#include "storage/fs/file_system.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/storage/file_system_fixture.h"

namespace dumpd::storage {
namespace {

using testing::actAsClient;
using testing::kClient;
using testing::kOtherUser;
using testing::makeDir;
using testing::makeFile;
using testing::TempDir;
using testing::TraversableTempDir;

TEST(PosixActAsTest, ARootOwnedPrivateRootRefusesTheClientAndCreatesNothing) {
  SKIP_UNLESS_ROOT();
  TempDir root;  // root:root 0700, as a job's dump path made by someone else
  const Credentials before = currentThreadCredentials();
  auto fs = actAsClient(root.path());
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto created = fs.value()->openDirectory("rank_0/Net", {.create = true});
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error().code, ErrorCode::kPermission) << created.error().message;
  auto top = fs.value()->openDirectory("", {});
  ASSERT_FALSE(top.has_value());
  EXPECT_EQ(top.error().code, ErrorCode::kPermission);
  EXPECT_TRUE(testing::listFiles(root.path()).empty());
  EXPECT_FALSE(std::filesystem::exists(root.path() + "/rank_0"));
  // Failed operations gave the credentials back as well.
  EXPECT_EQ(currentThreadCredentials(), before);
}

TEST(PosixActAsTest, ARootOwnedReadOnlyRootRefusesFilesAndDirectories) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir root;  // root:root 0755: the client may look, not write
  auto fs = actAsClient(root.path());
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto f = d.value()->newFile("x.npy", 0400);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kPermission);
  EXPECT_NE(f.error().message.find("x.npy"), std::string::npos);
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.error().code, ErrorCode::kPermission);
  auto sub = fs.value()->openDirectory("rank_0", {.create = true});
  ASSERT_FALSE(sub.has_value());
  EXPECT_EQ(sub.error().code, ErrorCode::kPermission);
  EXPECT_TRUE(testing::listFiles(root.path()).empty());
  EXPECT_FALSE(std::filesystem::exists(root.path() + "/rank_0"));
}

TEST(PosixActAsTest, CreatedDirectoriesAndFilesBelongToTheClient) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string root = base.path() + "/dumps";
  makeDir(root, 1234, 1234, 0700);
  auto fs = actAsClient(root);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("rank_0/Net/0/1", {.create = true, .sync_created = true});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto f = d.value()->newFile("t.npy", 0400);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  ASSERT_TRUE(f.value()->write(asBytes("data")));
  ASSERT_TRUE(f.value()->commit());
  auto a = d.value()->openAppend("statistic.csv");
  ASSERT_TRUE(a.has_value()) << a.error().message;
  ASSERT_TRUE(a.value()->append("row\n"));
  for (const char* p : {"rank_0", "rank_0/Net", "rank_0/Net/0", "rank_0/Net/0/1",
                        "rank_0/Net/0/1/t.npy", "rank_0/Net/0/1/statistic.csv"}) {
    struct stat st;
    ASSERT_EQ(::lstat((root + "/" + p).c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_uid, 1234u) << p;
    EXPECT_EQ(st.st_gid, 1234u) << p;
  }
  EXPECT_EQ(currentThreadCredentials().uid, 0u);
}

// A client may open (O_PATH) another user's private directory when its parent is searchable
// and send that fd as its dump root: nothing in it may be reached.
TEST(PosixActAsTest, AnotherUsersPrivateTreeCannotBeReachedThroughTheRootFd) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string victim = base.path() + "/victim";
  makeDir(victim, kOtherUser, kOtherUser, 0700);
  makeFile(victim + "/f", kOtherUser, kOtherUser, 0644, "theirs");
  makeDir(victim + "/rank_0", kOtherUser, kOtherUser, 0700);
  makeFile(victim + "/rank_0/statistic.csv", kOtherUser, kOtherUser, 0644, "header\n");
  int fd;
  {
    ScopedCredentials as_client;  // the client itself can get this fd
    ASSERT_TRUE(as_client.enter(kClient));
    fd = ::open(victim.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
  }
  PosixOptions o;
  o.act_as = kClient;
  auto fs = makePosixFileSystem(fd, o);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  for (const char* path : {"", "rank_0"}) {
    auto d = fs.value()->openDirectory(path, {});
    ASSERT_FALSE(d.has_value()) << path;
    EXPECT_EQ(d.error().code, ErrorCode::kPermission) << path;
  }
  auto created = fs.value()->openDirectory("rank_1", {.create = true});
  ASSERT_FALSE(created.has_value());
  EXPECT_EQ(created.error().code, ErrorCode::kPermission);
  EXPECT_EQ(testing::listFiles(victim), (std::vector<std::string>{"f", "rank_0/statistic.csv"}));
  EXPECT_EQ(testing::readFile(victim + "/f"), "theirs");
  EXPECT_EQ(testing::readFile(victim + "/rank_0/statistic.csv"), "header\n");
}

// The same with a directory the client may read: no file in it can be replaced, appended to
// or created.
TEST(PosixActAsTest, AnotherUsersFilesCannotBeReplacedAppendedToOrAddedTo) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string victim = base.path() + "/victim";
  makeDir(victim, kOtherUser, kOtherUser, 0755);
  makeFile(victim + "/f", kOtherUser, kOtherUser, 0644, "theirs");
  auto fs = actAsClient(victim);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto replace = d.value()->newFile("f", 0644);
  ASSERT_FALSE(replace.has_value());
  EXPECT_EQ(replace.error().code, ErrorCode::kPermission);
  auto append = d.value()->openAppend("f");
  ASSERT_FALSE(append.has_value());
  EXPECT_EQ(append.error().code, ErrorCode::kPermission);
  auto create = d.value()->newFile("g", 0644);
  ASSERT_FALSE(create.has_value());
  EXPECT_EQ(create.error().code, ErrorCode::kPermission);
  EXPECT_EQ(testing::listFiles(victim), std::vector<std::string>{"f"});
  EXPECT_EQ(testing::readFile(victim + "/f"), "theirs");
}

// In a sticky shared directory the client may create its temporary file, but renaming it over
// another user's file needs CAP_FOWNER, which the switch away from fsuid 0 drops.
TEST(PosixActAsTest, AnotherUsersFileInAStickyDirectoryCannotBeReplaced) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string shared = base.path() + "/shared";
  makeDir(shared, 0, 0, 01777);
  makeFile(shared + "/f", kOtherUser, kOtherUser, 0644, "theirs");
  auto fs = actAsClient(shared);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto f = d.value()->newFile("f", 0644);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  ASSERT_TRUE(f.value()->write(asBytes("mine")));
  auto s = f.value()->commit();
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kPermission) << s.error().message;
  EXPECT_FALSE(d.value()->openAppend("f").has_value());
  EXPECT_EQ(testing::readFile(shared + "/f"), "theirs");
  EXPECT_EQ(testing::listFiles(shared), std::vector<std::string>{"f"});  // temp file gone
}

TEST(PosixActAsTest, SupplementaryGroupsGrantGroupAccess) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string shared = base.path() + "/shared";
  makeDir(shared, 0, 4321, 0770);
  {
    auto fs = actAsClient(shared, Credentials{1234, 1234, {4321}});
    ASSERT_TRUE(fs.has_value()) << fs.error().message;
    auto d = fs.value()->openDirectory("rank_0", {.create = true});
    ASSERT_TRUE(d.has_value()) << d.error().message;
    auto f = d.value()->newFile("t.npy", 0400);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    ASSERT_TRUE(f.value()->commit());
  }
  {
    auto fs = actAsClient(shared, kClient);  // no group 4321
    ASSERT_TRUE(fs.has_value()) << fs.error().message;
    auto d = fs.value()->openDirectory("rank_1", {.create = true});
    ASSERT_FALSE(d.has_value());
    EXPECT_EQ(d.error().code, ErrorCode::kPermission);
  }
  EXPECT_EQ(testing::listFiles(shared), std::vector<std::string>{"rank_0/t.npy"});
}

}  // namespace
}  // namespace dumpd::storage
