// Acting as the client, root only: linking and copying its own and other users' files,
// concurrent clients, and daemons that may not or cannot switch uid.
#include "storage/fs/file_system.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/storage/file_system_fixture.h"

namespace dumpd::storage {
namespace {

using testing::actAsClient;
using testing::kClient;
using testing::kOtherUser;
using testing::linkOrCopy;
using testing::makeDir;
using testing::makeFile;
using testing::statOf;
using testing::TraversableTempDir;

// A link is a new entry of the directory: it needs the right to write there, link or copy.
TEST(PosixActAsTest, TheClientsFileCannotBeLinkedInADirectoryItCannotWrite) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir root;  // root:root 0755
  makeFile(root.path() + "/a", 1234, 1234, 0644, "mine");
  for (bool hard_links : {true, false}) {
    auto fs = actAsClient(root.path(), kClient, hard_links);
    ASSERT_TRUE(fs.has_value()) << fs.error().message;
    auto d = fs.value()->openDirectory("", {});
    ASSERT_TRUE(d.has_value()) << d.error().message;
    auto f = linkOrCopy(*d.value(), "a", "b", 0644);
    ASSERT_FALSE(f.has_value()) << hard_links;
    EXPECT_EQ(f.error().code, ErrorCode::kPermission) << f.error().message;
    EXPECT_NE(f.error().message.find("b"), std::string::npos) << f.error().message;
  }
  EXPECT_EQ(testing::listFiles(root.path()), std::vector<std::string>{"a"});
  EXPECT_EQ(statOf(root.path() + "/a").st_nlink, 1u);
  EXPECT_EQ(currentThreadCredentials().uid, 0u);
}

TEST(PosixActAsTest, TheClientLinksAndCopiesItsOwnFiles) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string root = base.path() + "/dumps";
  makeDir(root, 1234, 1234, 0700);
  makeFile(root + "/a", 1234, 1234, 0400, "mine");
  for (bool hard_links : {true, false}) {
    auto fs = actAsClient(root, kClient, hard_links);
    ASSERT_TRUE(fs.has_value()) << fs.error().message;
    auto d = fs.value()->openDirectory("", {});
    ASSERT_TRUE(d.has_value()) << d.error().message;
    const char* name = hard_links ? "link" : "copy";
    auto f = linkOrCopy(*d.value(), "a", name, 0440);
    ASSERT_TRUE(f.has_value()) << f.error().message;
    ASSERT_TRUE(f.value()->commit());
    struct stat st = statOf(root + "/" + name);
    EXPECT_EQ(st.st_uid, 1234u) << name;
    EXPECT_EQ(st.st_gid, 1234u) << name;
    EXPECT_EQ(st.st_mode & 07777, hard_links ? 0400u : 0440u) << name;
    EXPECT_EQ(testing::readFile(root + "/" + name), "mine");
  }
  EXPECT_EQ(statOf(root + "/a").st_nlink, 2u);  // a and link
  EXPECT_EQ(currentThreadCredentials().uid, 0u);
}

// fs.protected_hardlinks: another user's file may be linked only by someone who may read and
// write it. linkat's EPERM is kUnsupported; a copy needs only the right to read it.
TEST(PosixActAsTest, AnotherUsersFileIsCopiedWhereTheKernelForbidsALink) {
  SKIP_UNLESS_ROOT();
  if (testing::readFile("/proc/sys/fs/protected_hardlinks") != "1\n") {
    GTEST_SKIP() << "needs fs.protected_hardlinks = 1";
  }
  TraversableTempDir base;
  const std::string shared = base.path() + "/shared";
  makeDir(shared, 0, 0, 01777);
  makeFile(shared + "/readable", kOtherUser, kOtherUser, 0644, "theirs");
  makeFile(shared + "/private", kOtherUser, kOtherUser, 0600, "secret");
  auto fs = actAsClient(shared);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto link = d.value()->linkFile("readable", "mine");
  ASSERT_FALSE(link.has_value());
  EXPECT_EQ(link.error().code, ErrorCode::kUnsupported) << link.error().message;
  auto copy = d.value()->copyFile("readable", "mine", 0600);
  ASSERT_TRUE(copy.has_value()) << copy.error().message;
  EXPECT_EQ(copy.value()->bytesWritten(), 6u);
  ASSERT_TRUE(copy.value()->commit());
  struct stat st = statOf(shared + "/mine");
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_nlink, 1u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(testing::readFile(shared + "/mine"), "theirs");
  auto refused = linkOrCopy(*d.value(), "private", "stolen", 0600);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kPermission) << refused.error().message;
  EXPECT_NE(refused.error().message.find("private"), std::string::npos);
  EXPECT_EQ(testing::listFiles(shared), (std::vector<std::string>{"mine", "private", "readable"}));
  EXPECT_EQ(statOf(shared + "/private").st_nlink, 1u);
}

// In a sticky directory the client could neither rename nor remove a link to another user's
// file (even one it may read and write, which fs.protected_hardlinks lets it link): a copy.
TEST(PosixActAsTest, AnotherUsersFileInAStickyDirectoryIsCopiedNotLinked) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  const std::string shared = base.path() + "/shared";
  makeDir(shared, 0, 0, 01777);
  makeFile(shared + "/f", kOtherUser, kOtherUser, 0666, "theirs");
  auto fs = actAsClient(shared);
  ASSERT_TRUE(fs.has_value()) << fs.error().message;
  auto d = fs.value()->openDirectory("", {});
  ASSERT_TRUE(d.has_value()) << d.error().message;
  auto link = d.value()->linkFile("f", "mine");
  ASSERT_FALSE(link.has_value());
  EXPECT_EQ(link.error().code, ErrorCode::kUnsupported) << link.error().message;
  auto f = d.value()->copyFile("f", "mine", 0600);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f.value()->bytesWritten(), 6u);
  ASSERT_TRUE(f.value()->commit());
  EXPECT_EQ(statOf(shared + "/mine").st_uid, 1234u);
  EXPECT_EQ(statOf(shared + "/f").st_nlink, 1u);
  EXPECT_EQ(testing::readFile(shared + "/mine"), "theirs");
  EXPECT_EQ(testing::listFiles(shared), (std::vector<std::string>{"f", "mine"}));
}

// Writer threads are shared by sessions: two threads acting for two uids at once, each in a
// 0700 directory of its own uid (a leaked uid is refused there), each file checked for owner.
TEST(PosixActAsTest, ConcurrentClientsNeverGetEachOthersRights) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  constexpr int kIterations = 1000;
  std::atomic<int> failures{0};
  auto worker = [&](uid_t uid) {
    const std::string root = base.path() + "/" + std::to_string(uid);
    auto fs = actAsClient(root, Credentials{uid, uid, {}});
    if (!fs) {
      failures.fetch_add(kIterations);
      return;
    }
    auto d = fs.value()->openDirectory("rank_0", {.create = true});
    if (!d) {
      failures.fetch_add(kIterations);
      return;
    }
    for (int i = 0; i < kIterations; ++i) {
      std::string name = "t" + std::to_string(i);
      auto f = d.value()->newFile(name, 0400);
      if (!f || !f.value()->commit()) {
        failures.fetch_add(1);
        continue;
      }
      struct stat st;
      if (::lstat((root + "/rank_0/" + name).c_str(), &st) != 0 || st.st_uid != uid ||
          st.st_gid != uid) {
        failures.fetch_add(1);
      }
    }
    if (currentThreadCredentials().uid != 0) failures.fetch_add(1);
  };
  for (uid_t uid : {1234u, 1235u}) makeDir(base.path() + "/" + std::to_string(uid), uid, uid, 0700);
  std::thread a(worker, 1234u);
  std::thread b(worker, 1235u);
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(testing::listFiles(base.path()).size(), 2u * kIterations);
}

// Runs `check` in a forked child (which may then drop privileges for good); "" = passed.
void expectInChild(const std::function<std::string()>& check) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string failure = check();
    if (!failure.empty()) std::fprintf(stderr, "child: %s\n", failure.c_str());
    ::_exit(failure.empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see the child's stderr";
}

TEST(PosixActAsTest, ANonRootDaemonRefusesToActAsAnotherUid) {
  TraversableTempDir base;
  const uid_t self = ::geteuid() == 0 ? 1234 : ::geteuid();
  if (::geteuid() == 0) makeDir(base.path() + "/mine", 1234, 1234, 0700);
  expectInChild([&]() -> std::string {
    if (::geteuid() == 0) {  // become uid 1234 for good, as a daemon run as the job's user
      if (::setgroups(0, nullptr) != 0 || ::setgid(1234) != 0 || ::setuid(1234) != 0) {
        return "cannot drop to uid 1234";
      }
    } else {
      ::mkdir((base.path() + "/mine").c_str(), 0700);
    }
    auto other = actAsClient(base.path(), Credentials{self + 1, self + 1, {}});
    if (other.has_value()) return "acting as another uid was accepted";
    std::string want = "dumpd runs as uid " + std::to_string(self) + " and cannot act as uid " +
                       std::to_string(self + 1) + "; run it as root or as the job's user";
    if (other.error().code != ErrorCode::kPermission || other.error().message != want) {
      return "unexpected error: " + other.error().message;
    }
    // Its own uid is fine: it acts with its own credentials.
    auto mine = actAsClient(base.path() + "/mine", Credentials{self, 4321, {4321}});
    if (!mine) return "acting as itself failed: " + mine.error().message;
    if (!mine.value()->createDirectories("rank_0")) return "creating as itself failed";
    return "";
  });
}

TEST(PosixActAsTest, ARootDaemonThatCannotSwitchIsRefusedAndKeepsItsCredentials) {
  SKIP_UNLESS_ROOT();
  TraversableTempDir base;
  expectInChild([&]() -> std::string {
    // Drop CAP_SETUID from the effective set: setfsuid() then silently changes nothing.
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (::syscall(SYS_capget, &header, data) != 0) return "capget failed";
    data[0].effective &= ~(1u << CAP_SETUID);
    if (::syscall(SYS_capset, &header, data) != 0) return "capset failed";
    const Credentials before = currentThreadCredentials();
    auto fs = actAsClient(base.path(), Credentials{1234, 2345, {4321}});
    if (fs.has_value()) return "a file system that cannot switch was accepted";
    if (fs.error().code != ErrorCode::kPermission ||
        fs.error().message.find("setfsuid did not take effect") == std::string::npos) {
      return "unexpected error: " + fs.error().message;
    }
    // The groups and gid switched before the uid failed were rolled back.
    if (currentThreadCredentials() != before) return "credentials not rolled back";
    return "";
  });
}

}  // namespace
}  // namespace dumpd::storage
