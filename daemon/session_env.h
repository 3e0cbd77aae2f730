// What a dump session takes from the outside world, injected rather than reached for (the
// spirit of leveldb's Env, one interface per job):
//
//   Clock      (daemon/clock.h) steady time for deadlines, uptime and status refreshes; the
//              io thread's timers.
//   DumpRoots  the Hello's dump-root descriptor -> the root's identity (one live session per
//              root, rank and net) and the storage::FileSystem beneath it, acting as the client.
//   RingSource the Hello's ring descriptor -> the mapped ring the session drains.
//
// defaultSessionEnv() is production: the steady clock, POSIX roots (fstat, then the client's
// credentials for every file operation), memfd rings (ipc::RingConsumer::attach with all its
// checks). A test passes a fake clock and a memory file system, and rings made in its own
// process by ipc::RingProducer. Server takes a SessionEnv and hands it to every session
// through SessionContext.
//
// Thread-safety: DumpRoots and RingSource are called on session threads, several at once.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "daemon/clock.h"
#include "ipc/shm_ring.h"
#include "storage/fs/file_system.h"

namespace dumpd::daemon {

// The client process as the kernel reports it (SO_PEERCRED, SO_PEERGROUPS).
struct PeerIdentity {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

class DumpRoots {
 public:
  virtual ~DumpRoots() = default;
  // Who the root is, for the one-live-session rule (POSIX: "device:inode"). An error
  // (kProtocol) when `root` is not a directory.
  virtual Result<std::string> identify(const UniqueFd& root) = 0;
  // The file system beneath `root` (taken, closed even on error), every operation performed
  // as `peer`.
  virtual Result<std::shared_ptr<storage::FileSystem>> open(UniqueFd root,
                                                            const PeerIdentity& peer) = 0;
};

class RingSource {
 public:
  virtual ~RingSource() = default;
  // Maps the ring `ring` (taken) of `claimed_bytes`, refusing one above `max_ring_bytes`.
  virtual Result<ipc::RingConsumer> attach(UniqueFd ring, uint64_t claimed_bytes,
                                           uint64_t max_ring_bytes) = 0;
};

struct SessionEnv {
  std::shared_ptr<Clock> clock;
  std::shared_ptr<DumpRoots> roots;
  std::shared_ptr<RingSource> rings;
};

// Production: SteadyClock, POSIX roots acting as the client, memfd rings.
SessionEnv defaultSessionEnv();

}  // namespace dumpd::daemon
