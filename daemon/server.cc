#include "daemon/server.h"
#include "base/saturating.h"

#include <errno.h>
#include <grp.h>
#include <spdlog/spdlog.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "base/thread_name.h"
#include "daemon/connection.h"
#include "daemon/log_escape.h"
#include "daemon/worker_priority.h"
#include "ipc/socket_io.h"

namespace dumpd::daemon {

Server::Server(asio::io_context& io, DaemonSettings settings, std::string socket_path,
               SessionEnv env)
    : io_(io),
      settings_(std::move(settings)),
      socket_path_(std::move(socket_path)),
      env_(std::move(env)),
      acceptor_(io),
      // One session may hold at most a quarter of the write queue.
      pool_(std::make_unique<storage::WriterPool>(
          settings_.writer_threads, settings_.write_queue_bytes,
          [idle = settings_.workers_idle_priority] {
            setThreadName("dumpd-writer");
            applyWorkerPriority(idle);
          },
          std::max<uint64_t>(settings_.write_queue_bytes / 4, 1))),
      recorder_memory_(std::make_shared<RecorderBudgets>(settings_.recorder_memory_bytes)),
      started_(env_.clock->now()),
      give_up_timer_(env_.clock->makeTimer(io)),
      accept_retry_timer_(env_.clock->makeTimer(io)) {}

Server::~Server() {
  if (owns_socket_file_) ::unlink(socket_path_.c_str());
}

Status Server::listen(int inherited_fd) {
  using asio::local::stream_protocol;
  boost::system::error_code ec;
  if (inherited_fd >= 0) {
    acceptor_.assign(stream_protocol(), inherited_fd, ec);
    if (ec) return makeError(ErrorCode::kIo, "cannot adopt the systemd socket: " + ec.message());
    spdlog::info("listening on the socket passed by systemd");
    return {};
  }
  if (socket_path_.size() >= sizeof(sockaddr_un::sun_path)) {
    return makeError(ErrorCode::kInvalidArgument,
                     "socket path " + socket_path_ + " is longer than " +
                         std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
  }
  struct stat st;
  if (::lstat(socket_path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return makeError(ErrorCode::kInvalidArgument,
                       socket_path_ + " exists and is not a socket; refusing to replace it");
    }
    // A live daemon answers; a stale file from a crash refuses the connection.
    auto probe = ipc::connectUnix(socket_path_);
    if (probe) {
      return makeError(ErrorCode::kResourceExhausted,
                       "another dumpd is already serving " + socket_path_);
    }
    spdlog::info("replacing stale socket file {}", socket_path_);
    ::unlink(socket_path_.c_str());
  }
  const auto parent = std::filesystem::path(socket_path_).parent_path();
  if (!parent.empty()) {
    std::error_code fec;
    std::filesystem::create_directories(parent, fec);
  }
  acceptor_.open(stream_protocol(), ec);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(socket_path_), ec);
  if (ec) return makeError(ErrorCode::kIo, "cannot bind " + socket_path_ + ": " + ec.message());
  owns_socket_file_ = true;
  if (::chmod(socket_path_.c_str(), settings_.socket_mode) != 0) {
    return makeError(ErrorCode::kIo, "cannot chmod " + socket_path_ + ": " + strerror(errno));
  }
  if (!settings_.socket_group.empty()) {
    const group* g = ::getgrnam(settings_.socket_group.c_str());
    if (g == nullptr) {
      return makeError(ErrorCode::kInvalidArgument,
                       "socket_group '" + settings_.socket_group + "' does not exist");
    }
    if (::chown(socket_path_.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
      return makeError(ErrorCode::kPermission, "cannot give " + socket_path_ + " to group " +
                                                   settings_.socket_group + ": " + strerror(errno));
    }
  }
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return makeError(ErrorCode::kIo, "cannot listen on " + socket_path_ + ": " + ec.message());
  spdlog::info("listening on {}", socket_path_);
  return {};
}

void Server::start() { doAccept(); }

void Server::doAccept() {
  acceptor_.async_accept(
      [this](const boost::system::error_code& ec, asio::local::stream_protocol::socket socket) {
        if (ec) {
          if (ec == asio::error::operation_aborted || stopping_) return;
          spdlog::warn("accept failed: {}", ec.message());
          // EMFILE and friends: back off briefly instead of spinning.
          accept_retry_timer_->waitUntil(clock().now() + std::chrono::milliseconds(100), [this] {
            if (!stopping_) doAccept();
          });
          return;
        }
        if (stopping_) return;
        serve(std::move(socket));
        doAccept();
      });
}

namespace {

// SO_PEERCRED and SO_PEERGROUPS of a connected socket: the kernel's record of the client at
// connect time. Neither call can block.
PeerIdentity peerOf(int fd) {
  PeerIdentity p;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    p.pid = cred.pid;
    p.uid = cred.uid;
    p.gid = cred.gid;
  } else {
    // Unknown peer: treat it as nobody, never as root.
    p.uid = 65534;
    p.gid = 65534;
  }
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 3; ++attempt) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      p.groups = std::move(groups);
      return p;
    }
    if (errno != ERANGE) break;
    groups.resize(glen / sizeof(gid_t) + 1);
  }
  return p;  // no supplementary groups: the client acts with fewer rights, never more
}

}  // namespace

void Server::serve(asio::local::stream_protocol::socket socket) {
  const uint64_t id = next_id_++;
  PeerIdentity peer = peerOf(socket.native_handle());
  const uid_t uid = peer.uid;
  auto c = std::make_shared<Connection>(*this, std::move(socket), id, std::move(peer));
  std::string refused;
  if (connections_counted_ >= settings_.max_connections) {
    refused = "connection limit reached (" + std::to_string(settings_.max_connections) +
              " connections, max_connections in the daemon settings)";
  } else if (connections_per_uid_[uid] >= settings_.max_connections_per_uid) {
    refused = "uid " + std::to_string(uid) + " has " +
              std::to_string(settings_.max_connections_per_uid) +
              " connections open (max_connections_per_uid in the daemon settings)";
  }
  const bool counted = refused.empty();
  connections_[id] = Entry{c, counted};
  if (!counted) {
    if (connections_per_uid_[uid] == 0) connections_per_uid_.erase(uid);
    c->refuse(v1::Error::RESOURCE_EXHAUSTED, refused);
    return;
  }
  ++connections_counted_;
  ++connections_per_uid_[uid];
  c->start();
}

Result<uint64_t> Server::admitSession(uid_t uid) {
  if (sessions_ >= settings_.max_sessions) {
    return makeError(ErrorCode::kUnavailable,
                     "session limit reached (" + std::to_string(settings_.max_sessions) +
                         " sessions, max_sessions in the daemon settings)");
  }
  if (sessions_per_uid_[uid] >= settings_.max_sessions_per_uid) {
    return makeError(ErrorCode::kUnavailable,
                     "uid " + std::to_string(uid) + " has " +
                         std::to_string(settings_.max_sessions_per_uid) +
                         " dump sessions open (max_sessions_per_uid in the daemon settings)");
  }
  ++sessions_;
  ++sessions_per_uid_[uid];
  return ++sessions_total_;
}

bool Server::chargeFrameBytes(uint64_t n) {
  if (pending_frame_bytes_ + n > settings_.max_pending_frame_bytes) return false;
  pending_frame_bytes_ += n;
  return true;
}

void Server::releaseFrameBytes(uint64_t n) {
  pending_frame_bytes_ -= std::min(n, pending_frame_bytes_);
}

SessionContext Server::sessionContext() {
  return SessionContext{io_, *pool_, claims_, settings_, env_, accounts_, recorder_memory_};
}

void Server::connectionDone(const std::shared_ptr<Connection>& c) {
  auto it = connections_.find(c->id());
  if (it == connections_.end()) return;
  const uid_t uid = c->peer().uid;
  if (it->second.counted) {
    --connections_counted_;
    if (--connections_per_uid_[uid] == 0) connections_per_uid_.erase(uid);
  }
  if (const auto& s = c->session()) {
    --sessions_;
    if (--sessions_per_uid_[uid] == 0) sessions_per_uid_.erase(uid);
    s->addTotals(&closed_totals_);
    closed_write_errors_ = saturatingAdd(closed_write_errors_, s->writeErrors());
  }
  connections_.erase(it);
  maybeFinish();
}

void Server::shutdown(std::function<void()> on_give_up) {
  if (stopping_) return;
  stopping_ = true;
  spdlog::info("shutting down: draining {} session(s), at most {} ms", sessions_,
               settings_.shutdown_timeout_ms);
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_timer_->cancel();
  const auto deadline = clock().now() + std::chrono::milliseconds(settings_.shutdown_timeout_ms);
  // Copy: shutdown may end a connection synchronously.
  auto connections = connections_;
  for (auto& [id, e] : connections) e.connection->shutdown(deadline);
  give_up_timer_->waitUntil(deadline + kShutdownGrace, [this, on_give_up] {
    if (connections_.empty()) return;
    spdlog::error(
        "shutdown: {} connection(s) still not finished {} s after the deadline "
        "(a writer blocked on a file system?); exiting without them",
        connections_.size(), kShutdownGrace.count());
    if (on_give_up) on_give_up();
  });
  maybeFinish();
}

void Server::maybeFinish() {
  if (!stopping_ || !connections_.empty()) return;
  pool_->drain();
  give_up_timer_->cancel();
  spdlog::info("all sessions drained");
  io_.stop();
}

void Server::applySettings(const DaemonSettings& s) {
  // What can change at run time: limits and policies for new sessions, the log level.
  // Socket path/mode/group and the writer pool's shape need a restart; say so if they moved.
  const auto note = [](const char* key, const auto& from, const auto& to) {
    if (from != to) spdlog::info("settings: {} {} -> {}", key, from, to);
  };
  note("max_sessions", settings_.max_sessions, s.max_sessions);
  note("max_ring_bytes", settings_.max_ring_bytes, s.max_ring_bytes);
  note("backpressure", ipc::backpressureName(settings_.backpressure),
       ipc::backpressureName(s.backpressure));
  note("block_timeout_ms", settings_.block_timeout_ms, s.block_timeout_ms);
  note("durability", config::durabilityName(settings_.durability),
       config::durabilityName(s.durability));
  note("job_quota_bytes", settings_.job_quota_bytes, s.job_quota_bytes);
  note("min_free_bytes", settings_.min_free_bytes, s.min_free_bytes);
  note("compression", config::compressionName(settings_.compression),
       config::compressionName(s.compression));
  note("log_level", settings_.log_level, s.log_level);
  note("max_connections", settings_.max_connections, s.max_connections);
  note("max_connections_per_uid", settings_.max_connections_per_uid, s.max_connections_per_uid);
  note("max_sessions_per_uid", settings_.max_sessions_per_uid, s.max_sessions_per_uid);
  note("handshake_timeout_ms", settings_.handshake_timeout_ms, s.handshake_timeout_ms);
  note("shutdown_timeout_ms", settings_.shutdown_timeout_ms, s.shutdown_timeout_ms);
  note("max_open_directories", settings_.max_open_directories, s.max_open_directories);
  note("max_links_per_file", settings_.max_links_per_file, s.max_links_per_file);
  note("max_pending_frame_bytes", settings_.max_pending_frame_bytes, s.max_pending_frame_bytes);
  if (s.socket_path != settings_.socket_path || s.socket_mode != settings_.socket_mode ||
      s.socket_group != settings_.socket_group || s.writer_threads != settings_.writer_threads ||
      s.write_queue_bytes != settings_.write_queue_bytes ||
      s.workers_idle_priority != settings_.workers_idle_priority) {
    spdlog::warn("settings: socket and writer-pool changes take effect after a restart");
  }
  const DaemonSettings keep = settings_;
  settings_ = s;
  settings_.socket_path = keep.socket_path;
  settings_.socket_mode = keep.socket_mode;
  settings_.socket_group = keep.socket_group;
  settings_.writer_threads = keep.writer_threads;
  settings_.write_queue_bytes = keep.write_queue_bytes;
  settings_.workers_idle_priority = keep.workers_idle_priority;
}

uint32_t Server::openFds() const {
  // procfs: never blocks. O(open fds), which the limits bound.
  uint32_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
    n = n > 0 ? n - 1 : 0;  // the directory stream's own fd
  }
  return n;
}

std::vector<std::shared_ptr<DumpSession>> Server::liveSessions() const {
  std::vector<std::shared_ptr<DumpSession>> out;
  for (const auto& [id, e] : connections_) {
    if (const auto& s = e.connection->session()) out.push_back(s);
  }
  return out;
}

v1::StatusReply Server::status(uid_t requester) const {
  v1::StatusReply r;
  r.set_version(kVersion);
  r.set_pid(::getpid());
  r.set_uptime_s(std::chrono::duration<double>(env_.clock->now() - started_).count());
  r.set_socket(socket_path_);
  r.set_sessions_total(sessions_total_);
  r.set_connections(connections_counted_);
  r.set_open_fds(openFds());
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    r.set_fd_limit(rl.rlim_cur > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(rl.rlim_cur));
  }
  *r.mutable_totals() = closed_totals_;
  uint64_t write_errors = closed_write_errors_;
  std::map<std::string, uint64_t> disks;
  size_t bytes = r.ByteSizeLong();
  for (const auto& [id, e] : connections_) {
    const auto& s = e.connection->session();
    if (!s) continue;
    // Daemon-wide figures count every session; details only the caller's own (or all, for
    // root): pids, paths and errors of other users' jobs are theirs.
    s->addTotals(r.mutable_totals());
    write_errors = saturatingAdd(write_errors, s->writeErrors());
    if (requester != 0 && s->peer().uid != requester) {
      r.set_sessions_hidden(r.sessions_hidden() + 1);
      continue;
    }
    if (bytes > kMaxStatusReplyBytes - (64u << 10)) {
      r.set_sessions_omitted(r.sessions_omitted() + 1);
      continue;
    }
    v1::SessionStatus* ss = r.add_sessions();
    s->fillStatus(ss);
    bytes += ss->ByteSizeLong() + 8;
    if (auto d = s->disk()) disks[d->first] = d->second;
  }
  r.set_write_errors(write_errors);
  r.set_queue_pending_bytes(pool_->pendingBytes());
  r.set_queue_pending_records(pool_->pendingTasks());
  r.set_queue_capacity_bytes(pool_->capacityBytes());
  // Free space as the sessions last measured it: a statvfs here could hang on a dead mount.
  for (const auto& [path, free] : disks) {
    v1::DiskStatus* d = r.add_disks();
    d->set_path(path);
    d->set_free_bytes(free);
  }
  return r;
}

std::string Server::statusLine() const {
  const v1::StatusReply r = status(0);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%u session(s); %llu tensors written (%.1f MiB), %llu dropped",
                sessions_, static_cast<unsigned long long>(r.totals().tensors_written()),
                static_cast<double>(r.totals().bytes_written()) / (1 << 20),
                static_cast<unsigned long long>(r.totals().tensors_dropped()));
  return buf;
}

void Server::peerWarning(const std::string& line) {
  const LogLimiter::Admission a = peer_log_.admit();
  if (a.suppressed != 0) {
    spdlog::warn("{} similar client-caused warning(s) suppressed", a.suppressed);
  }
  if (a.log) spdlog::warn("{}", line);
}

}  // namespace dumpd::daemon
