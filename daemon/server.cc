#include "daemon/server.h"

#include <errno.h>
#include <grp.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "daemon/session.h"
#include "ipc/socket_io.h"

namespace dumpd::daemon {

void applyWorkerPriority(bool idle) {
  if (!idle) return;
  sched_param p{};
  // Per thread (0 = the caller). Lowering the policy needs no privilege; failure only means
  // the worker keeps normal priority.
  if (::sched_setscheduler(0, SCHED_IDLE, &p) != 0) {
    spdlog::debug("SCHED_IDLE unavailable: {}", strerror(errno));
  }
}

Server::Server(asio::io_context& io, config::DaemonSettings settings, std::string socket_path)
    : io_(io),
      settings_(std::move(settings)),
      socket_path_(std::move(socket_path)),
      acceptor_(io),
      pool_(std::make_unique<storage::WriterPool>(
          settings_.writer_threads, settings_.write_queue_bytes,
          [idle = settings_.workers_idle_priority] { applyWorkerPriority(idle); })),
      started_(std::chrono::steady_clock::now()) {}

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
          auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::milliseconds(100));
          timer->async_wait([this, timer](const boost::system::error_code&) { doAccept(); });
          return;
        }
        if (stopping_) return;
        const uint64_t id = next_id_++;
        auto session = std::make_shared<Session>(*this, std::move(socket), id);
        sessions_[id] = session;
        session->start();
        doAccept();
      });
}

uint32_t Server::activeDumpSessions() const {
  uint32_t n = 0;
  for (const auto& [id, s] : sessions_) n += s->isDumpSession() ? 1 : 0;
  return n;
}

Status Server::registerSession(Session& s) {
  if (activeDumpSessions() >= settings_.max_sessions) {
    return makeError(ErrorCode::kResourceExhausted,
                     "session limit reached (" + std::to_string(settings_.max_sessions) +
                         " sessions, max_sessions in the daemon settings)");
  }
  if (!claimed_.insert(s.conflictKey()).second) {
    return makeError(ErrorCode::kInvalidArgument,
                     "another live session already dumps rank and net of this job into the same "
                     "path");
  }
  ++sessions_total_;
  return {};
}

void Server::sessionEnded(const std::shared_ptr<Session>& s) {
  auto it = sessions_.find(s->id());
  if (it == sessions_.end()) return;
  if (s->registered()) claimed_.erase(s->conflictKey());
  if (s->isDumpSession()) {
    s->addTotals(&closed_totals_);
    closed_write_errors_ += s->writeErrors();
  }
  sessions_.erase(it);
  maybeFinish();
}

void Server::shutdown() {
  if (stopping_) return;
  stopping_ = true;
  spdlog::info("shutting down: draining {} session(s)", activeDumpSessions());
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  // Copy: requestStop may end a session synchronously.
  auto sessions = sessions_;
  for (auto& [id, s] : sessions) s->requestStop();
  maybeFinish();
}

void Server::maybeFinish() {
  if (!stopping_ || !sessions_.empty()) return;
  pool_->drain();
  spdlog::info("all sessions drained");
  io_.stop();
}

void Server::applySettings(const config::DaemonSettings& s) {
  // What can change at run time: limits and policies for new sessions, the log level.
  // Socket path/mode/group and the writer pool's shape need a restart; say so if they moved.
  const auto note = [](const char* key, const auto& from, const auto& to) {
    if (from != to) spdlog::info("settings: {} {} -> {}", key, from, to);
  };
  note("max_sessions", settings_.max_sessions, s.max_sessions);
  note("max_ring_bytes", settings_.max_ring_bytes, s.max_ring_bytes);
  note("backpressure", config::backpressureName(settings_.backpressure),
       config::backpressureName(s.backpressure));
  note("block_timeout_ms", settings_.block_timeout_ms, s.block_timeout_ms);
  note("durability", config::durabilityName(settings_.durability),
       config::durabilityName(s.durability));
  note("job_quota_bytes", settings_.job_quota_bytes, s.job_quota_bytes);
  note("min_free_bytes", settings_.min_free_bytes, s.min_free_bytes);
  note("compression", config::compressionName(settings_.compression),
       config::compressionName(s.compression));
  note("log_level", settings_.log_level, s.log_level);
  if (s.socket_path != settings_.socket_path || s.socket_mode != settings_.socket_mode ||
      s.socket_group != settings_.socket_group || s.writer_threads != settings_.writer_threads ||
      s.write_queue_bytes != settings_.write_queue_bytes) {
    spdlog::warn("settings: socket and writer-pool changes take effect after a restart");
  }
  settings_.max_sessions = s.max_sessions;
  settings_.max_ring_bytes = s.max_ring_bytes;
  settings_.backpressure = s.backpressure;
  settings_.block_timeout_ms = s.block_timeout_ms;
  settings_.durability = s.durability;
  settings_.job_quota_bytes = s.job_quota_bytes;
  settings_.min_free_bytes = s.min_free_bytes;
  settings_.compression = s.compression;
  settings_.log_level = s.log_level;
}

v1::StatusReply Server::status() const {
  v1::StatusReply r;
  r.set_version(kVersion);
  r.set_pid(::getpid());
  r.set_uptime_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  r.set_socket(socket_path_);
  r.set_sessions_total(sessions_total_);
  *r.mutable_totals() = closed_totals_;
  uint64_t write_errors = closed_write_errors_;
  std::set<std::string> roots;
  for (const auto& [id, s] : sessions_) {
    if (!s->isDumpSession()) continue;
    s->fillStatus(r.add_sessions());
    s->addTotals(r.mutable_totals());
    write_errors += s->writeErrors();
    roots.insert(s->rootPath());
  }
  r.set_write_errors(write_errors);
  r.set_queue_pending_bytes(pool_->pendingBytes());
  r.set_queue_pending_records(pool_->pendingTasks());
  r.set_queue_capacity_bytes(pool_->capacityBytes());
  for (const std::string& root : roots) {
    struct statvfs vfs;
    if (::statvfs(root.c_str(), &vfs) == 0) {
      v1::DiskStatus* d = r.add_disks();
      d->set_path(root);
      d->set_free_bytes(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize);
    }
  }
  return r;
}

std::string Server::statusLine() const {
  const v1::StatusReply r = status();
  char buf[256];
  std::snprintf(buf, sizeof buf, "%u session(s); %llu tensors written (%.1f MiB), %llu dropped",
                activeDumpSessions(), static_cast<unsigned long long>(r.totals().tensors_written()),
                static_cast<double>(r.totals().bytes_written()) / (1 << 20),
                static_cast<unsigned long long>(r.totals().tensors_dropped()));
  return buf;
}

}  // namespace dumpd::daemon
