// Job accounts (daemon/job_accounts.h): a job's reconnections share one account; no uid can
// make dumpd hold unbounded accounts or reset one by making many others.
#include "daemon/job_accounts.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

// Live heap bytes of this test binary (every operator new/delete counted).
namespace {
std::atomic<long long> g_live_bytes{0};
}  // namespace

void* operator new(size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  g_live_bytes += static_cast<long long>(malloc_usable_size(p));
  return p;
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  g_live_bytes -= static_cast<long long>(malloc_usable_size(p));
  std::free(p);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }

namespace dumpd::daemon {
namespace {

TEST(JobAccounts, TheSameJobGetsTheSameAccountAgain) {
  JobAccounts a;
  auto first = a.account(1000, "8:42:0:Net");
  first->payload_bytes += 600;
  auto again = a.account(1000, "8:42:0:Net");
  EXPECT_EQ(again, first);
  EXPECT_EQ(again->payload_bytes.load(), 600u);
  // Another uid, rank or net is another job.
  EXPECT_NE(a.account(1001, "8:42:0:Net"), first);
  EXPECT_NE(a.account(1000, "8:42:1:Net"), first);
  EXPECT_NE(a.account(1000, "8:42:0:Other"), first);
  EXPECT_EQ(a.size(), 4u);
}

TEST(JobAccounts, PastItsLimitAUidsNewJobsShareOneAccount) {
  JobAccounts a(/*max_per_uid=*/2, /*max_total=*/100);
  auto j1 = a.account(7, "j1");
  auto j2 = a.account(7, "j2");
  auto j3 = a.account(7, "j3");
  auto j4 = a.account(7, "j4");
  EXPECT_NE(j1, j2);
  EXPECT_EQ(j3, j4);  // the overflow account
  EXPECT_NE(j3, j1);
  // Known jobs keep theirs; other uids are not affected.
  EXPECT_EQ(a.account(7, "j1"), j1);
  EXPECT_NE(a.account(8, "j3"), j3);
  EXPECT_EQ(a.size(), 4u);
}

TEST(JobAccounts, AnAccountCostsTheSameWhateverItsJobIsNamed) {
  // Issue 48: the account key held the job's description, net name included: 32 sessions,
  // each with a new 2 MiB net name, left 114 MiB behind. Keys are digests now.
  JobAccounts a;
  const long long before = g_live_bytes.load();
  for (int i = 0; i < 32; ++i) {
    std::string job =
        "8:42:0:" + std::string(2 << 20, static_cast<char>('a' + i % 26)) + std::to_string(i);
    a.account(1000, job)->payload_bytes += 1;
  }
  const long long held = g_live_bytes.load() - before;
  EXPECT_EQ(a.size(), 32u);
  EXPECT_LT(held, 32 * 512) << "32 accounts hold " << held << " bytes";
  // Still one account a job: the same description finds it again.
  const std::string job = "8:42:0:" + std::string(2 << 20, 'a') + "0";
  EXPECT_EQ(a.account(1000, job)->payload_bytes.load(), 1u);
  EXPECT_EQ(a.size(), 32u);
}

TEST(JobAccounts, TheTotalIsBoundedAcrossUids) {
  JobAccounts a(/*max_per_uid=*/100, /*max_total=*/3);
  a.account(1, "a");
  a.account(2, "a");
  a.account(3, "a");
  auto x = a.account(4, "a");
  auto y = a.account(4, "b");
  EXPECT_EQ(x, y);
  EXPECT_LE(a.size(), 4u);
}

}  // namespace
}  // namespace dumpd::daemon
