#include "daemon/replica_reports.h"

#include <map>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "ipc/op_codec.h"
#include "ipc/ring_format.h"

namespace dumpd::daemon {

Result<TriggerEvent::Replicas> ReplicaReports::check(const v1::ReplicaMismatch& m) {
  const auto bad = [](std::string why) {
    return makeError(ErrorCode::kProtocol, "a replica mismatch report is malformed: " + why);
  };
  const uint64_t group = m.group_size();
  if (group == 0 || group > ipc::kMaxReplicaGroup) {
    return bad("its group has " + std::to_string(group) + " ranks (1 to " +
               std::to_string(ipc::kMaxReplicaGroup) + ")");
  }
  if (static_cast<uint64_t>(m.digests_size()) != group) {
    return bad(std::to_string(m.digests_size()) + " digests for a group of " +
               std::to_string(group));
  }
  if (m.ranks_size() == 0 || static_cast<uint64_t>(m.ranks_size()) > group) {
    return bad(std::to_string(m.ranks_size()) + " differing ranks in a group of " +
               std::to_string(group));
  }
  std::vector<bool> differs(group, false);
  for (uint32_t r : m.ranks()) {
    if (r >= group) return bad("rank " + std::to_string(r) + " is outside its group");
    differs[r] = true;
  }
  TriggerEvent::Replicas out;
  out.iteration = m.iteration();
  out.tensor = std::string(cutUtf8(m.tensor(), ipc::kMaxNameBytes));
  out.group_size = static_cast<uint32_t>(group);
  // The majority: the digest most of the agreeing ranks hold (all of them, when the client
  // compared as it should).
  std::map<uint64_t, uint32_t> votes;
  for (uint64_t r = 0; r < group; ++r) {
    if (!differs[r]) ++votes[m.digests(static_cast<int>(r))];
  }
  uint32_t best = 0;
  for (const auto& [digest, n] : votes) {
    if (n > best) {
      best = n;
      out.majority = digest;
    }
  }
  for (uint64_t r = 0; r < group; ++r) {
    if (!differs[r]) continue;
    ++out.differing_count;
    if (out.differing.size() < TriggerEvent::kMaxDifferingListed) {
      out.differing.emplace_back(static_cast<uint32_t>(r), m.digests(static_cast<int>(r)));
    }
  }
  return out;
}

void ReplicaReports::record(const TriggerEvent::Replicas& r) {
  count_.fetch_add(1, std::memory_order_relaxed);
  last_.store(std::make_shared<const std::string>(r.text()));
}

}  // namespace dumpd::daemon
