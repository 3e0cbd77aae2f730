#include "daemon/job_accounts.h"

#include <spdlog/spdlog.h>

namespace dumpd::daemon {

std::shared_ptr<storage::QuotaAccount> JobAccounts::account(uid_t uid, const std::string& job) {
  MutexLock lock(&mu_);
  auto key = std::make_pair(uid, job);
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
