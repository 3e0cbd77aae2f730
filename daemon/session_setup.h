// Session set-up, run on the session's own thread (never the io thread): everything here costs
// time in proportion to what the client sent, or touches the client's file system.
//
//   prepareSession: validates the job config in the client's environment, compiles its filter
//                   (RE2, linear time), identifies the dump root and maps the ring (no page
//                   faults), through the session's DumpRoots and RingSource.
//   openJobWriter:  opens the dump tree beneath the root (DumpRoots::open), acting as the
//                   client (uid, gid, supplementary groups) for every file-system operation.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "config/dump_plan.h"
#include "config/filter.h"
#include "daemon/daemon_settings.h"
#include "daemon/job_accounts.h"
#include "daemon/session_env.h"
#include "ipc/shm_ring.h"
#include "proto/dumpd.pb.h"
#include "storage/writer/job_writer.h"

namespace dumpd::daemon {

struct PreparedSession {
  config::DumpPlan plan;
  config::Filter filter;
  ipc::RingConsumer ring;
  UniqueFd root;
  // (root identity, rank, net): one live session per key.
  std::string conflict_key;
};

// `cancel`: set when the client hung up or dumpd is stopping; compiling stops early.
Result<PreparedSession> prepareSession(const v1::Hello& hello, UniqueFd ring_fd, UniqueFd root_fd,
                                       const DaemonSettings& settings, DumpRoots& roots,
                                       RingSource& rings,
                                       const std::atomic<bool>* cancel = nullptr);

struct OpenedWriter {
  std::shared_ptr<storage::FileSystem> fs;  // for free-space figures
  std::unique_ptr<storage::JobWriter> writer;
};
// `accounts` (may be null): the job's quota account is taken from there.
Result<OpenedWriter> openJobWriter(PreparedSession& s, const v1::Hello& hello,
                                   const PeerIdentity& peer, const DaemonSettings& settings,
                                   DumpRoots& roots, JobAccounts* accounts = nullptr);

// The wire code for an error of set-up.
v1::Error::Code wireCode(ErrorCode code);

}  // namespace dumpd::daemon
