// dumpd: the node-local tensor dump daemon.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "base/version.h"
#include "daemon/daemon_settings.h"
#include "daemon/server.h"
#include "ipc/asio.h"
#include "ipc/frame.h"
#include "ipc/ring_format.h"

namespace {

constexpr const char* kUsage =
    "usage: dumpd [--config FILE] [--socket PATH] [--log-level LEVEL]\n"
    "\n"
    "Node-local daemon that writes MindSpore-format tensor dumps for training processes.\n"
    "Serves until SIGTERM/SIGINT (drains every session, then exits 0). SIGHUP re-reads --config.\n"
    "\n"
    "  --config FILE       daemon settings (JSON, see config/dumpd.json and "
    "docs/configuration.md)\n"
    "  --socket PATH       listening socket (default: $DUMPD_SOCKET, else /run/dumpd/dumpd.sock)\n"
    "  --log-level LEVEL   trace, debug, info, warn, error, critical or off (default info)\n"
    "  --help, --version\n";

struct Args {
  std::string config;
  std::string socket;
  std::string log_level;
};

int usageError(const std::string& msg) {
  std::cerr << "dumpd: " << msg << "\n\n" << kUsage;
  return 2;
}

void setupLogging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("dumpd");
  // Under journald (JOURNAL_STREAM set) the journal adds timestamps; keep lines short.
  if (std::getenv("JOURNAL_STREAM") != nullptr) {
    logger->set_pattern("<%l> %v");
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e dumpd[%P] %l: %v");
  }
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dumpd;
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string& out) -> bool {
      if (i + 1 >= argc) return false;
      out = argv[++i];
      return true;
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (a == "--version") {
      std::cout << "dumpd " << kVersion << " (wire protocol " << ipc::kProtocolMajor << "."
                << ipc::kProtocolMinor << ", ring format " << ipc::kRingVersion
                << "; client CUDA device path: " << (kClientHasCuda ? "yes" : "no") << ")\n";
      return 0;
    } else if (a == "--config") {
      if (!value(args.config)) return usageError("--config needs a FILE");
    } else if (a == "--socket") {
      if (!value(args.socket)) return usageError("--socket needs a PATH");
    } else if (a == "--log-level") {
      if (!value(args.log_level)) return usageError("--log-level needs a LEVEL");
    } else {
      return usageError("unknown argument '" + a + "'");
    }
  }

  daemon::DaemonSettings settings;
  if (!args.config.empty()) {
    auto s = daemon::loadDaemonSettings(args.config);
    if (!s) {
      std::cerr << "dumpd: " << s.error().message << "\n";
      return 1;
    }
    settings = std::move(s.value());
  }
  if (!args.log_level.empty()) {
    static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
    bool ok = false;
    for (const char* l : kLevels) ok = ok || args.log_level == l;
    if (!ok) return usageError("unknown log level '" + args.log_level + "'");
    settings.log_level = args.log_level;
  }
  setupLogging(settings.log_level);
  const std::string socket_path =
      ipc::resolveSocketPath(args.socket.empty() ? settings.socket_path : args.socket);

  // Every connection, ring, root and open directory is an fd: use the hard limit, and say
  // whether the configured limits fit in it.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    // Per session: socket, ring, root, the writer's directories and two files per writer
    // thread in flight; per plain connection: its socket.
    const uint64_t per_session = 3 + uint64_t{settings.max_open_directories} + 4;
    const uint64_t budget = 64 + uint64_t{settings.max_connections} +
                            uint64_t{settings.max_sessions} * per_session +
                            2 * uint64_t{settings.writer_threads};
    if (budget > rl.rlim_cur) {
      spdlog::warn(
          "fd limit {} is below what the limits allow ({}): lower max_sessions, "
          "max_connections or max_open_directories, or raise LimitNOFILE",
          rl.rlim_cur, budget);
    } else {
      spdlog::info("fd limit {} (the limits use at most {})", rl.rlim_cur, budget);
    }
  }

  asio::io_context io;
  daemon::Server server(io, settings, socket_path);

  // Handlers first: once the socket exists a supervisor may signal us at any moment.
  asio::signal_set signals(io, SIGTERM, SIGINT, SIGHUP);

  int inherited = -1;
  const int n = sd_listen_fds(1);
  if (n > 1) {
    spdlog::error("systemd passed {} sockets; dumpd uses exactly one", n);
    return 1;
  }
  if (n == 1) inherited = SD_LISTEN_FDS_START;
  if (Status s = server.listen(inherited); !s) {
    spdlog::error("{}", s.error().message);
    return 1;
  }

  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          if (args.config.empty()) {
            spdlog::info("SIGHUP: no --config file to re-read");
          } else if (auto s = daemon::loadDaemonSettings(args.config); !s) {
            spdlog::error("SIGHUP: keeping the current settings: {}", s.error().message);
          } else {
            daemon::DaemonSettings next = std::move(s.value());
            if (!args.log_level.empty()) next.log_level = args.log_level;
            spdlog::set_level(spdlog::level::from_str(next.log_level));
            server.applySettings(next);
            spdlog::info("SIGHUP: settings re-read from {}", args.config);
          }
          signals.async_wait(on_signal);
          return;
        }
        spdlog::info("{}: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        sd_notify(0, "STOPPING=1");
        server.shutdown([] {
          // Bounded shutdown whatever clients or file systems do: what could be drained was.
          spdlog::default_logger()->flush();
          std::_Exit(0);
        });
      };
  signals.async_wait(on_signal);

  // Watchdog pings and STATUS= updates for systemd (no-ops without NOTIFY_SOCKET).
  uint64_t watchdog_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0;
  const auto period = watchdog ? std::chrono::microseconds(watchdog_usec / 2)
                               : std::chrono::microseconds(std::chrono::seconds(5));
  asio::steady_timer ticker(io);
  std::function<void(const boost::system::error_code&)> tick =
      [&](const boost::system::error_code& ec) {
        if (ec || server.stopping()) return;
        const std::string status = "STATUS=" + server.statusLine();
        sd_notify(0, status.c_str());
        if (watchdog) sd_notify(0, "WATCHDOG=1");
        ticker.expires_after(period);
        ticker.async_wait(tick);
      };
  ticker.expires_after(period);
  ticker.async_wait(tick);

  server.start();
  sd_notify(0, ("READY=1\nSTATUS=serving on " + socket_path).c_str());
  io.run();
  // Drained: a late SIGTERM/SIGINT must not turn the clean exit into a kill by signal.
  sigset_t late;
  sigemptyset(&late);
  sigaddset(&late, SIGTERM);
  sigaddset(&late, SIGINT);
  sigaddset(&late, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &late, nullptr);
  spdlog::info("dumpd exiting");
  return 0;
}
