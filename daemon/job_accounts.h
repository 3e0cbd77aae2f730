// Every job's account of what it wrote against its limits (job_quota_bytes, journal_bytes),
// kept for as long as dumpd runs: a client that is killed and reconnects into the same dump
// root, rank and net is the same job, and its new session is charged to the same account.
//
// A job is (uid, dump root identity, rank, net). Memory stays bounded: a job is keyed by the
// SHA-256 of its description, so an account costs the same few hundred bytes whatever the
// client named its net (an ended job keeps only its key and two counters); a uid holds at
// most kMaxPerUid accounts and dumpd kMaxTotal; past either, the uid's further jobs share one
// overflow account of that uid (together they get one job's quota), so no uid can reset an
// account by making many others.
//
// Thread-safety: every method may be called from any thread; mu_ guards the maps only.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "base/mutex.h"
#include "storage/writer/payload_gate.h"

namespace dumpd::daemon {

class JobAccounts {
 public:
  static constexpr size_t kMaxPerUid = 4096;
  static constexpr size_t kMaxTotal = 65536;

  explicit JobAccounts(size_t max_per_uid = kMaxPerUid, size_t max_total = kMaxTotal)
      : max_per_uid_(max_per_uid), max_total_(max_total) {}

  using Digest = std::array<uint8_t, 32>;

  // The account of job `job` ("root:rank:net") of `uid`, made on first use.
  std::shared_ptr<storage::QuotaAccount> account(uid_t uid, std::string_view job);
  // What an account is keyed by: SHA-256 of `job`.
  static Digest digest(std::string_view job);
  // Accounts held (overflow accounts included).
  size_t size() const;

 private:
  const size_t max_per_uid_;
  const size_t max_total_;
  mutable Mutex mu_;
  std::map<std::pair<uid_t, Digest>, std::shared_ptr<storage::QuotaAccount>> jobs_ GUARDED_BY(mu_);
  std::map<uid_t, size_t> per_uid_ GUARDED_BY(mu_);
  std::map<uid_t, std::shared_ptr<storage::QuotaAccount>> overflow_ GUARDED_BY(mu_);
};

}  // namespace dumpd::daemon
