#include "dumpctl/status_command.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "ipc/socket_io.h"
#include "ipc/socket_path.h"

namespace dumpd::dumpctl {
namespace {

nlohmann::json countsJson(const v1::Counts& c) {
  return {{"records", c.records()},
          {"tensors_received", c.tensors_received()},
          {"tensors_written", c.tensors_written()},
          {"bytes_written", c.bytes_written()},
          {"tensors_dropped", c.tensors_dropped()},
          {"tensors_failed", c.tensors_failed()},
          {"tensors_filtered", c.tensors_filtered()},
          {"tensors_linked", c.tensors_linked()},
          {"tensors_skipped", c.tensors_skipped()}};
}

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

Result<v1::StatusReply> fetch(const std::string& socket_path) {
  auto sock = ipc::connectUnix(socket_path);
  if (!sock) return sock.error();
  v1::Envelope req;
  req.mutable_status_request();
  if (Status s = ipc::sendFrame(sock->get(), req); !s) return s.error();
  ipc::FrameDecoder decoder;
  auto reply = ipc::recvFrame(sock->get(), decoder, 5000);
  if (!reply) return reply.error();
  if (reply->has_error()) return makeError(ErrorCode::kProtocol, reply->error().message());
  if (!reply->has_status_reply()) {
    return makeError(ErrorCode::kProtocol, "dumpd answered with an unexpected message");
  }
  return reply->status_reply();
}

// Names and errors come from clients: never send their control characters to a terminal.
std::string printable(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

}  // namespace

nlohmann::json statusToJson(const v1::StatusReply& r) {
  nlohmann::json j;
  j["version"] = r.version();
  j["pid"] = r.pid();
  j["uptime_s"] = r.uptime_s();
  j["socket"] = r.socket();
  nlohmann::json totals = countsJson(r.totals());
  totals["sessions_total"] = r.sessions_total();
  totals["write_errors"] = r.write_errors();
  j["totals"] = totals;
  j["connections"] = r.connections();
  j["open_fds"] = r.open_fds();
  j["fd_limit"] = r.fd_limit();
  j["sessions_hidden"] = r.sessions_hidden();
  j["sessions_omitted"] = r.sessions_omitted();
  j["queue"] = {{"pending_bytes", r.queue_pending_bytes()},
                {"pending_records", r.queue_pending_records()},
                {"capacity_bytes", r.queue_capacity_bytes()}};
  nlohmann::json sessions = nlohmann::json::array();
  for (const v1::SessionStatus& s : r.sessions()) {
    nlohmann::json o = countsJson(s.counts());
    o["id"] = s.id();
    o["pid"] = s.pid();
    o["uid"] = s.uid();
    o["rank"] = s.rank();
    o["device"] = s.device();
    o["net_name"] = s.net_name();
    o["path"] = s.path();
    o["graph_id"] = s.graph_id();
    o["iteration"] = s.iteration();
    if (s.has_job_iteration()) o["job_iteration"] = s.job_iteration();
    o["ring_used_bytes"] = s.ring_used_bytes();
    o["ring_capacity_bytes"] = s.ring_capacity_bytes();
    o["state"] = s.state();
    o["last_error"] = s.last_error();
    o["producer"] = s.producer();
    o["ms_format"] = s.ms_format();
    o["stop_reason"] = s.stop_reason();
    o["uptime_s"] = s.uptime_s();
    o["unused_kernels"] =
        std::vector<std::string>(s.unused_kernels().begin(), s.unused_kernels().end());
    o["unused_kernels_total"] = s.unused_kernels_total();
    o["open_directories"] = s.open_directories();
    o["client_dropped_tensors"] = s.client_dropped_tensors();
    o["selection"] = s.selection();
    o["selection_changed"] = s.selection_changed();
    o["selection_changed_by"] = s.selection_changed_by();
    o["paused"] = s.paused();
    o["replica_every"] = s.replica_every();
    o["journal_lines_refused"] = s.journal_lines_refused();
    o["replica_mismatches"] = s.replica_mismatches();
    o["last_replica_mismatch"] = s.last_replica_mismatch();
    if (s.has_recorder()) {
      const v1::RecorderStatus& f = s.recorder();
      o["recorder"] = {{"recording", f.recording()},
                       {"steps", f.steps()},
                       {"kept_iterations", f.kept_iterations()},
                       {"kept_bytes", f.kept_bytes()},
                       {"not_kept_whole", f.not_kept_whole()},
                       {"discarded_for_space", f.discarded_for_space()},
                       {"refused_for_memory", f.refused_for_memory()},
                       {"discarded_for_memory", f.discarded_for_memory()},
                       {"producer_waits", f.producer_waits()},
                       {"triggers", f.triggers()},
                       {"last_trigger", f.last_trigger()},
                       {"warning", f.warning()}};
    }
    sessions.push_back(o);
  }
  j["sessions"] = sessions;
  nlohmann::json disk = nlohmann::json::array();
  for (const v1::DiskStatus& d : r.disks()) {
    disk.push_back({{"path", d.path()}, {"free_bytes", d.free_bytes()}});
  }
  j["disk"] = disk;
  return j;
}

// "     recorder: on, keeps 3 of 4 iterations (12.0 MiB), 1 trigger (last: inf at ...)"
std::string recorderLine(const v1::RecorderStatus& f) {
  std::string s = "     recorder: " + std::string(f.recording() ? "on" : "off (max_triggers)") +
                  ", keeps " + std::to_string(f.kept_iterations()) + " of " +
                  std::to_string(f.steps()) + " iterations (" +
                  human(static_cast<double>(f.kept_bytes())) + "), " +
                  std::to_string(f.triggers()) + " trigger(s)";
  if (!f.last_trigger().empty()) s += " (last: " + printable(f.last_trigger()) + ")";
  if (f.not_kept_whole() != 0 || f.discarded_for_space() != 0) {
    s += ", " + std::to_string(f.not_kept_whole()) + " not kept whole, " +
         std::to_string(f.discarded_for_space()) + " discarded for ring space";
  }
  if (f.producer_waits() != 0) {
    s += ", training waited for ring space " + std::to_string(f.producer_waits()) + " time(s)";
  }
  if (f.refused_for_memory() != 0) {
    s += ", " + std::to_string(f.refused_for_memory()) +
         " records not kept (dumpd's recorder_memory_bytes used up)";
  }
  if (f.discarded_for_memory() != 0) {
    s += ", " + std::to_string(f.discarded_for_memory()) +
         " iterations discarded (dumpd's recorder_memory_bytes used up)";
  }
  s += "\n";
  if (!f.warning().empty()) s += "     recorder warning: " + printable(f.warning()) + "\n";
  return s;
}

std::string statusToTable(const v1::StatusReply& r) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line,
                "dumpd %s  pid %d  up %.0fs  socket %s\n"
                "sessions %d live / %llu total  written %llu tensors (%s)  dropped %llu  "
                "errors %llu  queue %s / %s\n",
                r.version().c_str(), r.pid(), r.uptime_s(), r.socket().c_str(), r.sessions_size(),
                static_cast<unsigned long long>(r.sessions_total()),
                static_cast<unsigned long long>(r.totals().tensors_written()),
                human(static_cast<double>(r.totals().bytes_written())).c_str(),
                static_cast<unsigned long long>(r.totals().tensors_dropped()),
                static_cast<unsigned long long>(r.write_errors()),
                human(static_cast<double>(r.queue_pending_bytes())).c_str(),
                human(static_cast<double>(r.queue_capacity_bytes())).c_str());
  out << line;
  std::snprintf(line, sizeof line, "connections %u  fds %u / %u\n", r.connections(), r.open_fds(),
                r.fd_limit());
  out << line;
  if (r.sessions_hidden() != 0) {
    out << r.sessions_hidden() << " session(s) of other users not shown (root sees all)\n";
  }
  if (r.sessions_omitted() != 0) {
    out << r.sessions_omitted() << " session(s) left out to keep the reply small\n";
  }
  if (r.sessions_size() == 0) {
    out << "no active sessions\n";
  } else {
    std::snprintf(
        line, sizeof line, "%-4s %-8s %-4s %-4s %-16s %-10s %10s %10s %8s %6s %-9s %-3s\n", "ID",
        "PID", "RANK", "DEV", "NET", "STEP", "WRITTEN", "BYTES", "DROPPED", "RING", "STATE", "MS");
    out << line;
    for (const v1::SessionStatus& s : r.sessions()) {
      const double ring = s.ring_capacity_bytes() == 0
                              ? 0
                              : 100.0 * static_cast<double>(s.ring_used_bytes()) /
                                    static_cast<double>(s.ring_capacity_bytes());
      // The job's step (its client says), and how many steps the daemon's reading is behind.
      std::string step = std::to_string(s.has_job_iteration() ? s.job_iteration() : s.iteration());
      if (s.has_job_iteration() && s.job_iteration() > s.iteration()) {
        step += " (-" + std::to_string(s.job_iteration() - s.iteration()) + ")";
      }
      std::snprintf(line, sizeof line,
                    "%-4llu %-8d %-4u %-4u %-16.16s %-10s %10llu %10s %8llu %5.0f%% %-9s %-3.3s\n",
                    static_cast<unsigned long long>(s.id()), s.pid(), s.rank(), s.device(),
                    printable(s.net_name()).c_str(), step.c_str(),
                    static_cast<unsigned long long>(s.counts().tensors_written()),
                    human(static_cast<double>(s.counts().bytes_written())).c_str(),
                    static_cast<unsigned long long>(s.counts().tensors_dropped()), ring,
                    s.state().c_str(), printable(s.ms_format()).c_str());
      out << line;
      if (!s.last_error().empty()) out << "     last error: " << printable(s.last_error()) << "\n";
      if (!s.stop_reason().empty()) {
        out << "     payloads stopped: " << printable(s.stop_reason()) << "\n";
      }
      if (s.journal_lines_refused() != 0) {
        out << "     journal lines not written: " << s.journal_lines_refused()
            << " (journal_bytes or min_free_bytes)\n";
      }
      if (s.selection_changed() || s.paused()) {
        out << "     selection (changed at runtime";
        if (!s.selection_changed_by().empty()) out << " by " << printable(s.selection_changed_by());
        out << "): iteration \"" << printable(s.selection()) << "\""
            << (s.paused() ? ", paused" : "");
        if (s.replica_every() != 0) out << ", replicas checked every " << s.replica_every();
        out << "\n";
      }
      if (s.has_recorder()) out << recorderLine(s.recorder());
      if (s.replica_mismatches() != 0) {
        out << "     replica mismatches: " << s.replica_mismatches()
            << ", last: " << printable(s.last_replica_mismatch()) << "\n";
      }
    }
  }
  for (const v1::DiskStatus& d : r.disks()) {
    out << "disk " << printable(d.path()) << ": " << human(static_cast<double>(d.free_bytes()))
        << " free\n";
  }
  return out.str();
}

int runStatusCommand(const std::string& socket, bool json, bool watch, std::ostream& out,
                     std::ostream& err) {
  const std::string path = ipc::resolveSocketPath(socket);
  for (;;) {
    auto r = fetch(path);
    if (!r) {
      err << "dumpctl: " << r.error().message << "\n";
      return 1;
    }
    if (watch) out << "\x1b[H\x1b[2J";  // home + clear: refresh in place
    if (json) {
      out << statusToJson(r.value()).dump(watch ? 2 : -1) << "\n";
    } else {
      out << statusToTable(r.value());
    }
    out.flush();
    if (!watch) return 0;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace dumpd::dumpctl
