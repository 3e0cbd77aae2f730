#include "daemon/session_env.h"

#include <sys/stat.h>

#include "storage/fs/credentials.h"

namespace dumpd::daemon {
namespace {

class PosixRoots final : public DumpRoots {
 public:
  Result<std::string> identify(const UniqueFd& root) override {
    struct stat st;
    if (::fstat(root.get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return makeError(ErrorCode::kProtocol, "dump root descriptor is not a directory");
    }
    return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  }

  Result<std::shared_ptr<storage::FileSystem>> open(UniqueFd root,
                                                    const PeerIdentity& peer) override {
    // Every file-system operation runs with the client's credentials: dumpd can only create,
    // replace or append where the client itself could, and what it creates belongs to it.
    // A root client may write anywhere the daemon may: no switch needed (saves a setgroups).
    storage::PosixOptions options;
    if (peer.uid != 0) options.act_as = storage::Credentials{peer.uid, peer.gid, peer.groups};
    return storage::makePosixFileSystem(root.release(), options);
  }
};

class MemfdRings final : public RingSource {
 public:
  Result<ipc::RingConsumer> attach(UniqueFd ring, uint64_t claimed_bytes,
                                   uint64_t max_ring_bytes) override {
    return ipc::RingConsumer::attach(std::move(ring), claimed_bytes, max_ring_bytes);
  }
};

}  // namespace

SessionEnv defaultSessionEnv() {
  return SessionEnv{std::make_shared<SteadyClock>(), std::make_shared<PosixRoots>(),
                    std::make_shared<MemfdRings>()};
}

}  // namespace dumpd::daemon
