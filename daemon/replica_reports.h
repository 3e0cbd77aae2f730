// Replica mismatches a client reports (docs/replicas.md). The client compared the digests of
// every rank of its group; the report is its word: checked for bounds (a group of at most
// ipc::kMaxReplicaGroup ranks, differing ranks within it), counted and kept for status, and
// turned into the event the journal and the flight recorder take. A report can only reach
// the session of the client that sent it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "base/snapshot.h"
#include "daemon/trigger_outcome.h"
#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

class ReplicaReports {
 public:
  // The report as the journal and the recorder take it, or why it is malformed.
  static Result<TriggerEvent::Replicas> check(const v1::ReplicaMismatch& m);
  // Counts a checked report for status (session thread).
  void record(const TriggerEvent::Replicas& r);
  // Any thread.
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  std::shared_ptr<const std::string> last() const { return last_.load(); }

 private:
  std::atomic<uint64_t> count_{0};
  Snapshot<std::string> last_;
};

}  // namespace dumpd::daemon
