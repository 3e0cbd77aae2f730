// The daemon's server: the listening socket, admission (connection and session limits), the
// set of live connections, status, and shutdown.
//
// Threading: everything here runs on the io thread, except chargeFrameBytes/releaseFrameBytes
// (io thread too) and what sessions read through SessionContext (the writer pool and the
// claim registry are thread-safe). Status reads sessions' atomics and snapshots only.
//
// The outside world comes in through the constructor's SessionEnv (daemon/session_env.h):
// the clock of every deadline, timer and uptime here and in connections and sessions, and
// what sessions use to open dump roots and rings. serve() takes a connected socket, so a test
// can drive the server over a socketpair without binding a path.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/result.h"
#include "base/version.h"
#include "daemon/daemon_settings.h"
#include "daemon/dump_session.h"
#include "daemon/log_limiter.h"
#include "ipc/asio.h"
#include "proto/dumpd.pb.h"
#include "storage/writer/writer_pool.h"

namespace dumpd::daemon {

class Connection;

// Bound on a status reply (the wire allows 16 MiB; everyone's `dumpctl status` must work).
inline constexpr size_t kMaxStatusReplyBytes = 4u << 20;

class Server {
 public:
  Server(asio::io_context& io, DaemonSettings settings, std::string socket_path,
         SessionEnv env = defaultSessionEnv());
  ~Server();

  // Binds the socket (replacing a stale file, refusing a live daemon's) or adopts a
  // listening socket passed by systemd. Errors name the path.
  Status listen(int inherited_fd = -1);
  // Accepts connections on the listening socket, each served as by serve().
  void start();
  // Serves a connected socket: admission (connection limits), then a Connection.
  void serve(asio::local::stream_protocol::socket socket);
  // Stops accepting and tells every session to drain (at most shutdown_timeout_ms), then lets
  // io_context::run() return. If sessions are still not done `kShutdownGrace` after the
  // deadline (a writer stuck on a hung file system), `on_give_up` runs (main exits 0).
  void shutdown(std::function<void()> on_give_up);
  bool stopping() const { return stopping_; }

  // What `requester_uid` may see: other users' sessions are shown to root only.
  v1::StatusReply status(uid_t requester_uid) const;
  // The sessions of every connection (io thread): dumpctl's session commands.
  std::vector<std::shared_ptr<DumpSession>> liveSessions() const;
  std::string statusLine() const;  // one line for sd_notify STATUS=

  // Connection callbacks (io thread).
  // The new session's id when `uid` may open one more dump session (ids number sessions
  // only, 1, 2, ...: status's total is the last id); otherwise an error saying why not.
  Result<uint64_t> admitSession(uid_t uid);
  bool chargeFrameBytes(uint64_t n);
  void releaseFrameBytes(uint64_t n);
  void connectionDone(const std::shared_ptr<Connection>& c);
  SessionContext sessionContext();

  asio::io_context& io() { return io_; }
  Clock& clock() { return *env_.clock; }
  const DaemonSettings& settings() const { return settings_; }
  // Logs a warning a client caused (malformed frames, refusals), within one rate limit
  // shared by all connections: a flood of bad clients cannot flood the journal.
  void peerWarning(const std::string& line);
  void applySettings(const DaemonSettings& s);

  static constexpr std::chrono::seconds kShutdownGrace{5};

 private:
  void doAccept();
  void maybeFinish();
  LogLimiter peer_log_{20, std::chrono::seconds(10)};
  uint32_t openFds() const;

  asio::io_context& io_;
  DaemonSettings settings_;
  std::string socket_path_;
  const SessionEnv env_;
  asio::local::stream_protocol::acceptor acceptor_;
  std::unique_ptr<storage::WriterPool> pool_;
  ClaimRegistry claims_;
  const std::shared_ptr<JobAccounts> accounts_ = std::make_shared<JobAccounts>();
  const std::shared_ptr<RecorderBudgets> recorder_memory_;
  struct Entry {
    std::shared_ptr<Connection> connection;
    bool counted;  // admitted (refused connections are not counted against the limits)
  };
  std::map<uint64_t, Entry> connections_;
  std::map<uid_t, uint32_t> connections_per_uid_;
  std::map<uid_t, uint32_t> sessions_per_uid_;
  uint32_t connections_counted_ = 0;
  uint32_t sessions_ = 0;
  uint64_t pending_frame_bytes_ = 0;
  uint64_t next_id_ = 1;  // connections (dumpctl's too); sessions have their own ids
  uint64_t sessions_total_ = 0;
  v1::Counts closed_totals_;  // figures of sessions that ended
  uint64_t closed_write_errors_ = 0;
  bool stopping_ = false;
  bool owns_socket_file_ = false;
  const TimePoint started_;  // env_.clock
  std::unique_ptr<Timer> give_up_timer_;
  std::unique_ptr<Timer> accept_retry_timer_;
};

}  // namespace dumpd::daemon
