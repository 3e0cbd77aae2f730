#include "client/replicas.h"

#include <optional>
#include <string>

#include "base/fingerprint.h"

namespace dumpd::client {
namespace {

// The digest more than half of the column holds, if any (Boyer-Moore's vote, then a count).
std::optional<uint64_t> majorityOf(std::span<const uint64_t> table, size_t ranks, size_t tensors,
                                   size_t column) {
  uint64_t candidate = 0;
  size_t votes = 0;
  for (size_t r = 0; r < ranks; ++r) {
    const uint64_t d = table[r * tensors + column];
    if (votes == 0) {
      candidate = d;
      votes = 1;
    } else if (d == candidate) {
      ++votes;
    } else {
      --votes;
    }
  }
  size_t held = 0;
  for (size_t r = 0; r < ranks; ++r) held += table[r * tensors + column] == candidate;
  if (2 * held > ranks) return candidate;
  return std::nullopt;
}

}  // namespace

uint64_t replicaDigest(const void* data, size_t bytes) {
  return fingerprint(std::span<const std::byte>(static_cast<const std::byte*>(data), bytes));
}

Result<std::vector<ReplicaVerdict>> compareReplicas(std::span<const uint64_t> table, size_t ranks,
                                                    size_t tensors) {
  // Compared by division: ranks x tensors may not fit in size_t.
  const bool fits =
      tensors == 0 ? table.empty() : table.size() % tensors == 0 && table.size() / tensors == ranks;
  if (!fits) {
    return makeError(ErrorCode::kInvalidArgument,
                     "the digest table has " + std::to_string(table.size()) + " digests, not " +
                         std::to_string(ranks) + " ranks x " + std::to_string(tensors) +
                         " tensors");
  }
  std::vector<ReplicaVerdict> out;
  for (size_t c = 0; c < tensors; ++c) {
    bool equal = true;
    for (size_t r = 1; r < ranks && equal; ++r) equal = table[r * tensors + c] == table[c];
    if (equal) continue;
    ReplicaVerdict v;
    v.tensor = c;
    const std::optional<uint64_t> m = majorityOf(table, ranks, tensors, c);
    v.majority = m.has_value();
    v.majority_digest = m.value_or(0);
    for (size_t r = 0; r < ranks; ++r) {
      if (!m || table[r * tensors + c] != *m) v.ranks.push_back(static_cast<uint32_t>(r));
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace dumpd::client
