// Replica checks for any job (docs/replicas.md): the digest of a tensor's bytes, and the
// comparison of the digests every rank of a group gathered. A C++ job digests its replicated
// tensors after each step, all-gathers the digests over its own communicator (MPI, NCCL, ...),
// compares them here and reports each tensor whose replicas differ with
// Client::reportReplicaMismatch. dumpd.torch.check_replicas does the same for PyTorch jobs,
// with this comparison.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/result.h"

namespace dumpd::client {

// The replica digest of `bytes` bytes of host memory (base/fingerprint.h's rule: every
// single-bit flip changes it).
uint64_t replicaDigest(const void* data, size_t bytes);

// One tensor whose replicas differ.
struct ReplicaVerdict {
  size_t tensor = 0;             // its column in the table
  bool majority = false;         // some digest is held by more than half of the ranks
  uint64_t majority_digest = 0;  // that digest (majority only)
  // The group ranks that differ from the majority, ascending; every rank when there is no
  // majority (two replicas that differ: the digests cannot say which one is wrong).
  std::vector<uint32_t> ranks;
};

// Compares the gathered digests: `table` holds `ranks` rows of `tensors` digests, row r being
// group rank r's, in the same tensor order on every rank. Returns the tensors whose digests
// are not all equal, in column order; kInvalidArgument when the table is not ranks x tensors.
Result<std::vector<ReplicaVerdict>> compareReplicas(std::span<const uint64_t> table, size_t ranks,
                                                    size_t tensors);

}  // namespace dumpd::client
