// The daemon's server: the listening socket, the set of live sessions, status, shutdown.
//
// Threading: everything here runs on the io_context thread, except status figures read from
// sessions' atomics and the writer pool (thread-safe).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "config/daemon_settings.h"
#include "config/result.h"
#include "ipc/asio.h"
#include "proto/dumpd.pb.h"
#include "storage/writer_pool.h"

namespace dumpd::daemon {

class Session;

inline constexpr const char* kVersion = "0.1.0";

// Applies the worker scheduling policy of the settings to the calling thread.
void applyWorkerPriority(bool idle);

class Server {
 public:
  Server(asio::io_context& io, config::DaemonSettings settings, std::string socket_path);
  ~Server();

  // Binds the socket (replacing a stale file, refusing a live daemon's) or adopts a
  // listening socket passed by systemd. Errors name the path.
  Status listen(int inherited_fd = -1);
  void start();
  // Stops accepting, drains every session, then lets io_context::run() return.
  void shutdown();
  bool stopping() const { return stopping_; }

  v1::StatusReply status() const;
  std::string statusLine() const;  // one line for sd_notify STATUS=

  // Session callbacks (io thread).
  Status registerSession(Session& s);
  void sessionEnded(const std::shared_ptr<Session>& s);
  asio::io_context& io() { return io_; }
  storage::WriterPool& pool() { return *pool_; }
  const config::DaemonSettings& settings() const { return settings_; }
  void applySettings(const config::DaemonSettings& s);
  uint32_t activeDumpSessions() const;

 private:
  void doAccept();
  void maybeFinish();

  asio::io_context& io_;
  config::DaemonSettings settings_;
  std::string socket_path_;
  asio::local::stream_protocol::acceptor acceptor_;
  std::unique_ptr<storage::WriterPool> pool_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_;
  std::set<std::string> claimed_;  // conflict keys of live dump sessions
  uint64_t next_id_ = 1;
  uint64_t sessions_total_ = 0;
  v1::Counts closed_totals_;  // figures of sessions that ended
  uint64_t closed_write_errors_ = 0;
  bool stopping_ = false;
  bool owns_socket_file_ = false;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace dumpd::daemon
