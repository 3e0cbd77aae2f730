#include "daemon/job_accounts.h"

#include <openssl/evp.h>
#include <spdlog/spdlog.h>

namespace dumpd::daemon {

JobAccounts::Digest JobAccounts::digest(std::string_view job) {
  Digest out{};
  unsigned int size = 0;
  // EVP_Digest cannot fail for SHA-256 with valid arguments short of an allocation failure;
  // an all-zero digest then only merges this uid's own jobs.
  (void)EVP_Digest(job.data(), job.size(), out.data(), &size, EVP_sha256(), nullptr);
  return out;
}

std::shared_ptr<storage::QuotaAccount> JobAccounts::account(uid_t uid, std::string_view job) {
  auto key = std::make_pair(uid, digest(job));
  MutexLock lock(&mu_);
  if (auto it = jobs_.find(key); it != jobs_.end()) return it->second;
  size_t& mine = per_uid_[uid];
  if (mine < max_per_uid_ && jobs_.size() + overflow_.size() < max_total_) {
    ++mine;
    return jobs_.emplace(std::move(key), std::make_shared<storage::QuotaAccount>()).first->second;
  }
  auto& shared = overflow_[uid];
  if (!shared) {
    spdlog::warn(
        "uid {} has more jobs than dumpd keeps accounts for ({} a uid, {} in all): its "
        "further jobs share one job_quota_bytes and journal_bytes",
        uid, max_per_uid_, max_total_);
    shared = std::make_shared<storage::QuotaAccount>();
  }
  return shared;
}

size_t JobAccounts::size() const {
  MutexLock lock(&mu_);
  return jobs_.size() + overflow_.size();
}

}  // namespace dumpd::daemon
