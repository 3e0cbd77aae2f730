// ScopedCredentials with real uids: these tests need root (as CI runs them) and skip otherwise.
#include "storage/fs/credentials.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "storage/fs/file_system.h"
#include "storage_test_util.h"

namespace dumpd::storage {
namespace {

using testing::TempDir;

const Credentials kUser{1234, 1234, {}};
const Credentials kOther{1235, 1235, {}};

#define SKIP_UNLESS_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: switches to real uids 1234 and 1235"

// The calling thread's effective capability set (first 32 bits), as the kernel sees it now.
uint32_t effectiveCapabilities() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};  // pid 0: this thread
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return 0;
  return data[0].effective;
}

bool hasCapability(int cap) { return (effectiveCapabilities() & (1u << cap)) != 0; }

// Creates (O_EXCL) and removes a file: whether this thread may write into `dir` now.
bool canCreateIn(const std::string& dir) {
  std::string path = dir + "/probe-" + std::to_string(::gettid());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  ::close(fd);
  ::unlink(path.c_str());
  return true;
}

// A TempDir owned by root with mode 0700: only root (with CAP_DAC_OVERRIDE) may write in it.
class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_ROOT();
    ASSERT_EQ(::chmod(root_only_.path().c_str(), 0700), 0);
  }
  TempDir root_only_;
};

TEST_F(CredentialsTest, TheThreadGetsTheClientsFsuidFsgidAndGroupsAndLosesThemAfter) {
  const Credentials before = currentThreadCredentials();
  const Credentials client{1234, 2345, {4321, 4322}};
  {
    ScopedCredentials scope;
    ASSERT_TRUE(scope.enter(client));
    EXPECT_TRUE(scope.switched());
    EXPECT_EQ(currentThreadCredentials(), client);
    EXPECT_FALSE(canCreateIn(root_only_.path()));
  }
  EXPECT_EQ(currentThreadCredentials(), before);
  EXPECT_TRUE(canCreateIn(root_only_.path()));  // a root-only operation works again
}

TEST_F(CredentialsTest, LeavingFsuidZeroDropsTheFileCapabilitiesAndReturningRestoresThem) {
  for (int cap : {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
    ASSERT_TRUE(hasCapability(cap)) << cap;
  }
  {
    ScopedCredentials scope;
    ASSERT_TRUE(scope.enter(kUser));
    for (int cap : {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
      EXPECT_FALSE(hasCapability(cap)) << cap;
    }
    // What lets the thread switch back.
    EXPECT_TRUE(hasCapability(CAP_SETUID));
    EXPECT_TRUE(hasCapability(CAP_SETGID));
  }
  for (int cap : {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER}) {
    EXPECT_TRUE(hasCapability(cap)) << cap;
  }
}

TEST_F(CredentialsTest, CredentialsArePerThread) {
  const Credentials before = currentThreadCredentials();
  const Credentials client{1234, 1234, {4321}};
  std::mutex mu;
  std::condition_variable cv;
  bool inside = false, checked = false;
  bool denied_inside = false;
  std::thread worker([&] {
    ScopedCredentials scope;
    ASSERT_TRUE(scope.enter(client));
    denied_inside = !canCreateIn(root_only_.path());
    std::unique_lock lock(mu);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return checked; });  // holds the scope until the main thread checked
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return inside; });
  }
  // While the other thread holds uid 1234 and group 4321, this one is still root, with its
  // own groups (glibc's setgroups() would have changed them in every thread).
  EXPECT_EQ(currentThreadCredentials(), before);
  EXPECT_TRUE(canCreateIn(root_only_.path()));
  {
    std::lock_guard lock(mu);
    checked = true;
  }
  cv.notify_all();
  worker.join();
  EXPECT_TRUE(denied_inside);
}

TEST_F(CredentialsTest, ANestedScopeWithTheSameCredentialsSwitchesNothingAndKeepsThem) {
  ScopedCredentials outer;
  ASSERT_TRUE(outer.enter(kUser));
  ASSERT_TRUE(outer.switched());
  {
    const Credentials same = kUser;  // equal, another object
    ScopedCredentials inner;
    ASSERT_TRUE(inner.enter(same));
    EXPECT_FALSE(inner.switched());
  }
  // The inner scope's end did not give the thread root back early.
  EXPECT_FALSE(canCreateIn(root_only_.path()));
  EXPECT_EQ(currentThreadCredentials().uid, 1234u);
}

TEST_F(CredentialsTest, NestedScopesWithOtherCredentialsRestoreTheOuterOnes) {
  {
    ScopedCredentials outer;
    ASSERT_TRUE(outer.enter(kUser));
    {
      ScopedCredentials inner;
      ASSERT_TRUE(inner.enter(kOther));
      EXPECT_EQ(currentThreadCredentials(), kOther);
    }
    EXPECT_EQ(currentThreadCredentials(), kUser);
  }
  EXPECT_EQ(currentThreadCredentials().uid, 0u);
}

TEST_F(CredentialsTest, NullCredentialsChangeNothing) {
  const Credentials before = currentThreadCredentials();
  ScopedCredentials scope;
  ASSERT_TRUE(scope.enter(nullptr));
  EXPECT_FALSE(scope.switched());
  EXPECT_EQ(currentThreadCredentials(), before);
}

// Two threads switch between uid 1234 and 1235 concurrently; each creates files in a 0700
// directory of its own uid (a leaked uid would be refused) and checks the owner of each.
TEST_F(CredentialsTest, ConcurrentScopesForDifferentUidsNeverLeakIntoEachOther) {
  TempDir base;
  ASSERT_EQ(::chmod(base.path().c_str(), 0755), 0);
  constexpr int kIterations = 1000;
  std::atomic<int> failures{0};
  auto worker = [&](const Credentials& creds) {
    std::string dir = base.path() + "/" + std::to_string(creds.uid);
    for (int i = 0; i < kIterations; ++i) {
      ScopedCredentials scope;
      if (!scope.enter(creds)) {
        failures.fetch_add(1);
        continue;
      }
      std::string path = dir + "/f" + std::to_string(i);
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      struct stat st;
      if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_uid != creds.uid || st.st_gid != creds.gid) {
        failures.fetch_add(1);
      }
      if (fd >= 0) ::close(fd);
      if (currentThreadCredentials() != creds) failures.fetch_add(1);
    }
    // Outside the scopes the thread is root again.
    if (currentThreadCredentials().uid != 0) failures.fetch_add(1);
  };
  for (const Credentials* c : {&kUser, &kOther}) {
    std::string dir = base.path() + "/" + std::to_string(c->uid);
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chown(dir.c_str(), c->uid, c->gid), 0);
  }
  std::thread a(worker, std::cref(kUser));
  std::thread b(worker, std::cref(kOther));
  a.join();
  b.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(testing::listFiles(base.path()).size(), 2u * kIterations);
}

// Not a pass/fail figure: prints what a switch costs (DESIGN: one scope per file operation).
TEST_F(CredentialsTest, CostOfASwitch) {
  using Clock = std::chrono::steady_clock;
  const Credentials client{1234, 1234, {4321}};
  constexpr int kScopes = 20000;
  auto t0 = Clock::now();
  for (int i = 0; i < kScopes; ++i) {
    ScopedCredentials scope;
    ASSERT_TRUE(scope.enter(client));
  }
  auto t1 = Clock::now();
  {
    ScopedCredentials outer;
    ASSERT_TRUE(outer.enter(client));
    for (int i = 0; i < kScopes; ++i) {
      ScopedCredentials nested;
      ASSERT_TRUE(nested.enter(client));
    }
  }
  auto t2 = Clock::now();
  auto perSecond = [&](Clock::duration d) {
    return static_cast<double>(kScopes) / std::chrono::duration<double>(d).count();
  };
  std::printf("full switch in and out: %.0f scopes/s (%.2f us each); nested: %.0f scopes/s\n",
              perSecond(t1 - t0), 1e6 / perSecond(t1 - t0), perSecond(t2 - t1));
  RecordProperty("switch_scopes_per_second", static_cast<int>(perSecond(t1 - t0)));
  EXPECT_EQ(currentThreadCredentials().uid, 0u);
}

}  // namespace
}  // namespace dumpd::storage
